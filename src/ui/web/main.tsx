import { render } from "preact";
import { config, finishSignIn, signIn, signOut } from "./api.ts";
import { prefetch, problem, signedOut, unreachableSince, type View, view } from "./state.ts";
import { Approvals, Audit, Dashboard, Files, Jobs, Machines, Sessions, Terminals } from "./views.tsx";
import "./style.css";

/**
 * The Human UI: what the server is doing (sessions, shells, jobs, todos, audit) and a way to step in
 * (type into a shell, cancel a job, end a session). Every text that comes from the machine is put in
 * the page as text (Preact escapes it; previews use textContent), never as HTML.
 */

const VIEWS: Array<[View, string]> = [
  ["dashboard", "Dashboard"],
  ["sessions", "Sessions"],
  ["terminals", "Terminals"],
  ["files", "Files"],
  ["jobs", "Jobs"],
  ["approvals", "Approvals"],
  ["audit", "Audit"],
  ["machines", "Machines"],
];

const PANES: Record<View, () => preact.JSX.Element> = {
  dashboard: Dashboard,
  sessions: Sessions,
  terminals: Terminals,
  files: Files,
  jobs: Jobs,
  approvals: Approvals,
  audit: Audit,
  machines: Machines,
};

function App() {
  const Pane = PANES[view.value] ?? Dashboard;
  if (signedOut.value && config.oauth) {
    return (
      <main class="signin">
        <h1>local-shell-mcp</h1>
        <p>Sign in with the approval PIN of this server (the server log names the file that holds it).</p>
        <button
          type="button"
          data-testid="sign-in"
          onClick={() => void signIn().catch((e: unknown) => (problem.value = String(e)))}
        >
          Sign in
        </button>
        {problem.value ? <p class="problem">{problem.value}</p> : null}
      </main>
    );
  }
  return (
    <div class={`shell wallpaper-${config.wallpaper}`}>
      <nav>
        <strong>local-shell-mcp</strong>
        {VIEWS.map(([v, label]) => (
          <a
            key={v}
            href={`#${v}`}
            class={view.value === v ? "active" : ""}
            data-view={v}
            onClick={() => (view.value = v)}
          >
            {label}
          </a>
        ))}
        {config.oauth ? (
          <button type="button" class="link" onClick={() => void signOut().then(() => (signedOut.value = true))}>
            Sign out
          </button>
        ) : null}
      </nav>
      {unreachableSince.value !== null ? (
        <p class="problem" data-testid="connection">
          The server is not answering (since {new Date(unreachableSince.value).toLocaleTimeString()}); retrying. What is
          shown may be out of date.
        </p>
      ) : null}
      {problem.value ? (
        <p class="problem" onClick={() => (problem.value = null)}>
          {problem.value}
        </p>
      ) : null}
      <main>
        <Pane />
      </main>
    </div>
  );
}

async function start(): Promise<void> {
  if (!config.dashboard && !location.pathname.endsWith("/callback") && view.value === "dashboard")
    prefetch("dashboard");
  if (location.pathname.endsWith("/callback")) {
    try {
      await finishSignIn();
    } catch (e) {
      problem.value = e instanceof Error ? e.message : String(e);
      signedOut.value = true;
    }
  }
  window.addEventListener("hashchange", () => (view.value = (location.hash.slice(1) as View) || "dashboard"));
  render(<App />, document.getElementById("app")!);
}

void start();
