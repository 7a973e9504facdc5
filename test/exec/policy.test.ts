import { describe, expect, test } from "bun:test";
import { deniedCommand } from "../../src/exec/policy.ts";

const DEFAULT = [
  "docker.sock",
  "/var/run/docker.sock",
  "mkfs",
  "mount",
  "umount",
  "shutdown",
  "reboot",
  "systemctl",
  "iptables",
  "nft",
];

describe("command denylist matches command words, not substrings", () => {
  test.each([
    ["grep amount notes.txt"],
    ["git commit -m 'mount fix'"],
    ["cat docker.sock.txt"],
    ["echo remounted"],
    ["ls -la /mnt"],
  ])("allows %p", (cmd) => {
    expect(deniedCommand(cmd, DEFAULT)).toBeUndefined();
  });

  test.each([
    ["mount /dev/sda1 /mnt", "mount"],
    ["sudo mount -a", "mount"],
    ["echo hi && /bin/mount x", "mount"],
    ["mkfs.ext4 /dev/x", "mkfs"],
    ["curl --unix-socket /var/run/docker.sock http://x", "docker.sock"],
    ["echo $(systemctl status)", "systemctl"],
    ['echo "$(reboot)"', "reboot"],
    ["ls; reboot", "reboot"],
    ["FOO=1 nft list ruleset", "nft"],
    ["env -i umount /x", "umount"],
    ["x=1\nshutdown -h now", "shutdown"],
  ])("refuses %p", (cmd, entry) => {
    expect(deniedCommand(cmd, DEFAULT)).toBe(entry);
  });

  test("an empty denylist allows everything", () => {
    expect(deniedCommand("mount /dev/sda1 /mnt", [])).toBeUndefined();
  });
});
