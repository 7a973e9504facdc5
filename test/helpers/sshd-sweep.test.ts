/**
 * The sshd fixture's sweep of users left by a killed run must spare a fixture that another test
 * file is setting up at the same moment: `useradd -m` writes the user before it makes the home.
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { $ } from "bun";
import { needsRoot } from "./harness.ts";
import { sweepLeftovers } from "./sshd.ts";

const name = `lsmssh${Math.random().toString(36).slice(2, 8).padEnd(6, "0")}`;
const fixture = mkdtempSync(join(tmpdir(), "lsm-sshd-sweep-"));
const exists = () =>
  readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .some((l) => l.startsWith(`${name}:`));

afterAll(async () => {
  if (exists()) await $`userdel -f ${name}`.quiet().nothrow();
  rmSync(`/etc/sudoers.d/${name}`, { force: true });
  rmSync(fixture, { recursive: true, force: true });
});

describe.skipIf(needsRoot("the sweep removes system users and sudoers rules"))("the sshd fixture's sweep", () => {
  test("keeps a user whose home is not made yet while its fixture folder exists, and removes it after", async () => {
    mkdirSync(join(fixture, "home"));
    // As another file's startSshd leaves things between its useradd and the home's creation.
    await $`useradd -M -d ${join(fixture, "home", name)} -s /bin/bash ${name}`.quiet();
    writeFileSync(`/etc/sudoers.d/${name}`, "", { mode: 0o440 });
    await sweepLeftovers();
    const rule = () => Bun.file(`/etc/sudoers.d/${name}`).exists();
    expect({ user: exists(), rule: await rule() }).toEqual({ user: true, rule: true });

    rmSync(fixture, { recursive: true, force: true });
    await sweepLeftovers();
    expect({ user: exists(), rule: await rule() }).toEqual({ user: false, rule: false });
  });
});
