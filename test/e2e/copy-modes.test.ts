/**
 * session_copy keeps a file's permission bits on every route: a 4 MiB 0755 file (over the 1 MiB
 * gateway threshold, so between hosts it goes by http_stream) arrives 0755 whichever way it goes.
 * Two workers, each in its own namespace behind the https base_url.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { needsRoot, tempDir, type TempDir } from "../helpers/harness.ts";
import { type Controller, enrolWorker, startController, type Worker } from "../helpers/remote.ts";
import { bigFile } from "../helpers/transfer.ts";

type Side = "L" | "L2" | "A" | "A2" | "B";

describe.skipIf(needsRoot("the workers run in their own network namespaces (ip netns, veth)"))(
  "modes across copy routes",
  () => {
    let ws: TempDir;
    let state: TempDir;
    let ctl: Controller;
    let wa: Worker;
    let wb: Worker;
    const s = {} as Record<Side, string>;
    const dirs = {} as Record<Side, string>;

    beforeAll(async () => {
      ws = tempDir("lsm-modes-");
      state = tempDir("lsm-modes-state-");
      ctl = await startController({ state: state.path, workspace: ws.path, net: true });
      wa = await enrolWorker(ctl, "alpha", { netns: true });
      wb = await enrolWorker(ctl, "beta", { netns: true });
      Object.assign(dirs, {
        L: join(ws.path, "l"),
        L2: join(ws.path, "l2"),
        A: join(wa.workdir, "a"),
        A2: join(wa.workdir, "a2"),
        B: join(wb.workdir, "b"),
      });
      for (const d of Object.values(dirs)) mkdirSync(d);
      s.L = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l" })).session_id;
      s.L2 = (await ctl.mcp.ok<{ session_id: string }>("session_start", { workdir: "l2" })).session_id;
      for (const [k, machine] of [
        ["A", "alpha"],
        ["A2", "alpha"],
        ["B", "beta"],
      ] as const) {
        s[k] = (
          await ctl.mcp.ok<{ session_id: string }>("session_start", { target: "remote", machine, workdir: dirs[k] })
        ).session_id;
      }
      for (const side of ["L", "A"] as const) {
        bigFile(join(dirs[side], "tool.bin"), 4);
        chmodSync(join(dirs[side], "tool.bin"), 0o755);
      }
    }, 90_000);
    afterAll(async () => {
      await wa?.stop();
      await wb?.stop();
      await ctl?.dispose();
      for (const d of [wa?.root, wb?.root, ws, state]) d?.[Symbol.dispose]();
    }, 60_000);

    test("a 4 MiB 0755 file stays 0755 on every route", async () => {
      const cases: Array<[Side, Side, string]> = [
        ["L", "L2", "local"],
        ["L", "A2", "http_stream"],
        ["A", "L2", "http_stream"],
        ["A", "A2", "same_worker"],
        ["A", "B", "http_stream"],
      ];
      const seen: string[] = [];
      for (const [from, to, transport] of cases) {
        const dst = `from-${from}.bin`;
        const r = await ctl.mcp.ok<{ result: { transport: string } }>("session_copy", {
          src_session_id: s[from],
          src_path: "tool.bin",
          dst_session_id: s[to],
          dst_path: dst,
        });
        const mode = statSync(join(dirs[to], dst)).mode & 0o777;
        seen.push(`${from}->${to} ${r.result.transport}: ${mode.toString(8)}`);
        expect({ route: `${from}->${to}`, transport: r.result.transport, mode: mode.toString(8) }).toEqual({
          route: `${from}->${to}`,
          transport,
          mode: "755",
        });
      }
      console.log(seen.join("\n"));
    }, 120_000);
  },
);
