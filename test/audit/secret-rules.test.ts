/**
 * The shared secret rule set, rule by rule: each rule finds its secret in a sample (and exactly the
 * secret, where it has a group), and leaves a near miss alone. Samples are built at run time from a
 * seeded generator, so the repository holds no token-shaped strings for scanners to trip on.
 */
import { describe, expect, test } from "bun:test";
import { entropy, findSecrets, replaceSecrets, SECRET_RULES } from "../../src/audit/secret-rules.ts";

let seed = 42;
/** Deterministic random string over `chars`. */
function rnd(chars: string, n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    out += chars[(seed >>> 12) % chars.length];
  }
  return out;
}
const UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const LOWER = "abcdefghijklmnopqrstuvwxyz";
const DIGITS = "0123456789";
const ALNUM = UPPER + LOWER + DIGITS;
const HEX = "0123456789abcdef";
const B64 = `${ALNUM}/+`;
/** 40 base64 characters with every class present (what the bare-key rule wants). */
const awsSecret = () => `Ab1/${rnd(B64, 36)}`;

interface Case {
  /** Text holding the secret. */
  text: string;
  /** The secret the rule must report. */
  secret: string;
  /** A near miss the rule must not report. */
  miss: string;
}

const pem = `-----BEGIN OPENSSH PRIVATE KEY-----\n${rnd(B64, 64)}\n${rnd(B64, 64)}\n-----END OPENSSH PRIVATE KEY-----`;
const awsKeyId = `AKIA${rnd(UPPER + DIGITS, 16)}`;
const namedAws = awsSecret();
const ant = `sk-ant-api03-${rnd(ALNUM, 40)}`;
const oai = `sk-proj-${rnd(ALNUM, 40)}`;
const ghp = `ghp_${rnd(ALNUM, 36)}`;
const glpat = `glpat-${rnd(ALNUM, 20)}`;
const xoxb = `xoxb-${rnd(DIGITS, 12)}-${rnd(DIGITS, 13)}-${rnd(ALNUM, 24)}`;
const hook = `hooks.slack.com/services/T${rnd(UPPER, 8)}/B${rnd(UPPER, 8)}/${rnd(ALNUM, 24)}`;
const stripe = `sk_live_${rnd(ALNUM, 24)}`;
const gkey = `AIza${rnd(`${ALNUM}_-`, 35)}`;
const npm = `npm_${rnd(ALNUM, 36)}`;
const pypi = `pypi-AgEIcHlwaS5vcmc${rnd(ALNUM, 60)}`;
const hf = `hf_${rnd(ALNUM, 34)}`;
const sg = `SG.${rnd(ALNUM, 22)}.${rnd(ALNUM, 43)}`;
const twilio = `SK${rnd(HEX, 32)}`;
const dop = `dop_v1_${rnd(HEX, 64)}`;
const hvs = `hvs.${rnd(ALNUM, 30)}`;
const shp = `shpat_${rnd(HEX, 32)}`;
const tg = `${rnd(DIGITS, 9)}:AA${rnd(ALNUM, 33)}`;
const age = `AGE-SECRET-KEY-1${rnd("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)}`;
const dapi = `dapi${rnd(HEX, 32)}`;
const lsm = `lsmcp_wk_${rnd(ALNUM, 30)}`;
const jwt = `eyJ${rnd(ALNUM, 20)}.eyJ${rnd(ALNUM, 30)}.${rnd(ALNUM, 30)}`;
const bare = awsSecret();

const CASES: Record<string, Case[]> = {
  private_key: [
    { text: `key:\n${pem}\nafter`, secret: pem, miss: "-----BEGIN PUBLIC KEY-----" },
    { text: `-----BEGIN RSA PRIVATE KEY-----\n${rnd(B64, 64)}`, secret: "", miss: "a private key is needed" },
  ],
  aws_access_key: [{ text: `id=${awsKeyId} ok`, secret: awsKeyId, miss: `AKIA${rnd(UPPER, 10)}` }],
  aws_secret_key: [
    { text: `aws_secret_access_key = ${namedAws}`, secret: namedAws, miss: "aws_secret_access_key = short" },
  ],
  anthropic_key: [{ text: `ANTHROPIC=${ant}`, secret: ant, miss: "sk-ant-short" }],
  openai_key: [{ text: `key ${oai}`, secret: oai, miss: "task-force" }],
  github_token: [{ text: `push with ${ghp}`, secret: ghp, miss: "ghp_short" }],
  gitlab_token: [{ text: `token ${glpat}`, secret: glpat, miss: "glpat-short" }],
  slack_token: [{ text: `SLACK: ${xoxb}`, secret: xoxb, miss: "xoxb-" }],
  slack_webhook: [{ text: `curl https://${hook}`, secret: hook, miss: "hooks.slack.com/services/" }],
  stripe_key: [{ text: `stripe ${stripe}`, secret: stripe, miss: "sk_live_x" }],
  google_api_key: [{ text: `k=${gkey}`, secret: gkey, miss: "AIzaShort" }],
  npm_token: [{ text: `//registry.npmjs.org/:_authToken=${npm}`, secret: npm, miss: "npm_install" }],
  pypi_token: [{ text: `password = ${pypi}`, secret: pypi, miss: "pypi-AgEI" }],
  huggingface_token: [{ text: `HF ${hf}`, secret: hf, miss: "hf_model" }],
  sendgrid_key: [{ text: `SENDGRID ${sg}`, secret: sg, miss: "SG.abc.def" }],
  twilio_key: [{ text: `sid ${twilio}`, secret: twilio, miss: `SK${rnd(HEX, 10)}` }],
  digitalocean_token: [{ text: `do ${dop}`, secret: dop, miss: "dop_v1_abc" }],
  vault_token: [{ text: `VAULT ${hvs}`, secret: hvs, miss: "hvs.short" }],
  shopify_token: [{ text: `shop ${shp}`, secret: shp, miss: "shpat_123" }],
  telegram_bot_token: [{ text: `bot ${tg}`, secret: tg, miss: "12:AAbc" }],
  age_secret_key: [{ text: `# key\n${age}`, secret: age, miss: "AGE-SECRET-KEY-1" }],
  databricks_token: [{ text: `db ${dapi}`, secret: dapi, miss: "dapi123" }],
  lsm_worker_token: [{ text: `worker ${lsm}`, secret: lsm, miss: "lsmcp_wk_x" }],
  jwt: [{ text: `Authorization: ${jwt}`, secret: jwt, miss: "eyJhbGc" }],
  mysql_password: [
    { text: "mysql -pS3cretPw db", secret: "S3cretPw", miss: "mysql -p db" },
    { text: "mysql -u root -h db1 -p'two words' app", secret: "'two words'", miss: "mysql -u root -p" },
    {
      text: 'mysqldump --single-transaction -u root -p"Qu0ted!pw" app > x.sql',
      secret: '"Qu0ted!pw"',
      miss: "mysql --port 3306",
    },
    { text: "mariadb -uadmin -pMaria99x", secret: "Maria99x", miss: "mysql -P3306 app" },
  ],
  sshpass_password: [
    { text: "sshpass -p 'Hunter 22' ssh host", secret: "'Hunter 22'", miss: "sshpass -f pwfile ssh host" },
    { text: "sshpass -pPlainPw9 scp a b:", secret: "PlainPw9", miss: "sshpass -e ssh host" },
  ],
  redis_password: [{ text: "redis-cli -h r1 -a R3disPw ping", secret: "R3disPw", miss: "redis-cli -h r1 ping" }],
  curl_credentials: [
    { text: "curl -u admin:CurlPw77 https://h/x", secret: "admin:CurlPw77", miss: "curl -s https://h/x" },
  ],
  url_password: [{ text: "postgres://app:UrlPw555@db/app", secret: "UrlPw555", miss: "https://example.com/a:b" }],
  generic_assignment: [{ text: 'client_secret: "GenSecret9"', secret: "GenSecret9", miss: 'secret: "short"' }],
  dotenv_assignment: [{ text: "x=1\nexport DB_PASSWORD=DotEnvPw1\n", secret: "DotEnvPw1", miss: "DB_PASSWORD=\n" }],
  aws_secret_key_bare: [
    { text: `printed:\n${bare}\n`, secret: bare, miss: "0123456789abcdef0123456789abcdef01234567" },
  ],
};

describe("secret rules", () => {
  test("every rule has cases, and every case names a rule", () => {
    expect(Object.keys(CASES).sort()).toEqual(SECRET_RULES.map((r) => r.id).sort());
  });

  for (const r of SECRET_RULES) {
    test(`${r.id}: finds its secret and leaves a near miss alone`, () => {
      for (const c of CASES[r.id] ?? []) {
        const found = findSecrets(c.text, [r]);
        expect(found.length).toBeGreaterThan(0);
        if (c.secret) expect(found.map((f) => f.secret)).toContain(c.secret);
        expect(findSecrets(c.miss, [r])).toEqual([]);
        // Replaced, nothing of the secret is left.
        const scrubbed = replaceSecrets(c.text, "<x>", found);
        if (c.secret) expect(scrubbed).not.toContain(c.secret);
      }
    });
  }

  test("the bare key rule wants a random-looking value: no hex digests, no words", () => {
    const sha1 = rnd(HEX, 40);
    expect(findSecrets(`commit ${sha1}`, SECRET_RULES).filter((f) => f.rule.id === "aws_secret_key_bare")).toEqual([]);
    expect(findSecrets("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", SECRET_RULES)).toEqual([]);
    expect(entropy(bare)).toBeGreaterThan(4.2);
  });

  test("overlapping finds are replaced once", () => {
    const text = `a ${oai} b`;
    expect(replaceSecrets(text, "<x>")).toBe("a <x> b");
  });

  test("a large text costs linear time", () => {
    const big = `${"word ".repeat(200_000)}mysql ${"-x ".repeat(50_000)}`;
    const t = performance.now();
    findSecrets(big);
    expect(performance.now() - t).toBeLessThan(3000);
  });
});
