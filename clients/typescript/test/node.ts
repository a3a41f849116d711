// A real standalone chitin node for the tests: the binary from CHITIN_BIN
// (or target/debug/chitin), SQLite in a temporary directory, on free
// loopback ports; stopped when the process exits.

import { spawn, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as os from "node:os";
import * as path from "node:path";

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export interface Node {
  api: string;
  metrics: string;
  stop(): void;
}

export async function startNode(): Promise<Node> {
  const root = path.resolve(__dirname, "..", "..", "..", "..");
  const binary = process.env.CHITIN_BIN ?? path.join(root, "target", "debug", "chitin");
  if (!fs.existsSync(binary)) throw new Error(`no chitin binary at ${binary}; build it (cargo build -p chitin) or set CHITIN_BIN`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "chitin-ts-"));
  const [api, metrics] = [`127.0.0.1:${await freePort()}`, `127.0.0.1:${await freePort()}`];
  fs.writeFileSync(
    path.join(dir, "chitin.toml"),
    `[node]\ndata_dir = "${path.join(dir, "data")}"\n\n[api]\nlisten = "${api}"\n\n[metrics]\nlisten = "${metrics}"\n`,
  );
  const log = fs.openSync(path.join(dir, "node.log"), "w");
  const child: ChildProcess = spawn(binary, ["node", "--settings", path.join(dir, "chitin.toml")], { stdio: ["ignore", log, log] });
  const stop = () => {
    child.kill("SIGTERM");
  };
  process.on("exit", stop);
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the node exited (${child.exitCode}):\n${fs.readFileSync(path.join(dir, "node.log"), "utf8")}`);
    try {
      const r = await fetch(`http://${metrics}/readyz`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`the node was not ready within 60 s:\n${fs.readFileSync(path.join(dir, "node.log"), "utf8")}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return { api, metrics, stop };
}
