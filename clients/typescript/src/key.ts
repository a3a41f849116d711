/** 32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193). */
export function fnv1a(data: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of data) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h >>> 0;
}

/** The 32-bit key of a journal stream: FNV-1a over its UTF-8 bytes. */
export function stream_key(stream: string): number {
  return fnv1a(Buffer.from(stream, "utf8"));
}
