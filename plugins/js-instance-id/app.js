// A chitin `instance-id` policy in JavaScript, built with ComponentizeJS:
// the Kubernetes pod name (POD_NAME) when set and non-empty, else the
// default policy (CHITIN__CLUSTER__INSTANCE_ID, else chitin-<hostname>, else
// chitin). Same behaviour and fixtures as plugins/pod-instance-id (Rust).
//
// The export object is named after the WIT interface (`instance-id` ->
// `instanceId`); `ctx.env` is a list of [name, value] pairs.

export function resolveName(ctx) {
  const env = new Map(ctx.env);
  const pod = env.get('POD_NAME');
  if (pod) return pod;
  const explicit = env.get('CHITIN__CLUSTER__INSTANCE_ID');
  if (explicit !== undefined) return explicit;
  if (ctx.hostname) return `chitin-${ctx.hostname}`;
  return 'chitin';
}

export const instanceId = {
  resolve(ctx) {
    return resolveName(ctx);
  },
};
