// Text files imported with `with { type: "text" }` (tool descriptions, server instructions).
declare module "*.md" {
  const text: string;
  export default text;
}
// Native helpers embedded with `with { type: "file" }`: the import is the embedded file's path.
declare module "*/lsm-runner" {
  const path: string;
  export default path;
}
declare module "*/tmux" {
  const path: string;
  export default path;
}
// The worker join script's body (src/remote/join.sh), served as text.
declare module "*.sh" {
  const text: string;
  export default text;
}
