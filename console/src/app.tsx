import { useEffect, useMemo, useState } from 'preact/hooks';
import { forgetKey, openSession, storedKey, isAuthLost, can, type Session } from './session.js';
import { LiveEvents } from './live.js';
import { useLiveState, Ctx, useConsole } from './ui/context.js';
import { authMessage } from './ui/hooks.js';
import { Link, Loading } from './ui/components.js';
import { match, useLocation, navigate } from './router.js';
import { SignIn } from './views/sign-in.js';
import { ROUTES, NAV } from './routes.js';

/** Signed in or not; a key that stops working (401) brings the user back here with the reason. */
export function App() {
  const [session, setSession] = useState<Session | null>(null);
  const [restoring, setRestoring] = useState(() => storedKey() !== null);
  const [message, setMessage] = useState<string | null>(null);

  useEffect(() => {
    const key = storedKey();
    if (!key) return;
    openSession(key).then(
      (s) => (setSession(s), setRestoring(false)),
      (err: unknown) => {
        if (isAuthLost(err)) forgetKey();
        setMessage(isAuthLost(err) ? authMessage(err) : `Could not restore the session: ${err instanceof Error ? err.message : String(err)}`);
        setRestoring(false);
      },
    );
  }, []);

  if (restoring) return <Loading label="Signing in" />;
  if (!session) return <SignIn message={message} onSignedIn={(s) => (setMessage(null), setSession(s))} />;
  return (
    <SignedIn
      session={session}
      onSignOut={(why) => {
        forgetKey();
        setMessage(why);
        setSession(null);
      }}
    />
  );
}

function SignedIn({ session, onSignOut }: { session: Session; onSignOut: (why: string | null) => void }) {
  const live = useMemo(() => new LiveEvents(session, (err) => onSignOut(authMessage(err))), [session]);
  useEffect(() => {
    live.start();
    return () => live.stop();
  }, [live]);
  const ctx = useMemo(() => ({ session, live, authLost: (m: string) => onSignOut(m) }), [session, live]);
  return (
    <Ctx.Provider value={ctx}>
      <Shell onSignOut={() => onSignOut(null)} />
    </Ctx.Provider>
  );
}

function Shell({ onSignOut }: { onSignOut: () => void }) {
  const { session } = useConsole();
  const loc = useLocation();
  const state = useLiveState();
  let view = null;
  for (const r of ROUTES) {
    const params = match(r.path, loc.path);
    if (!params) continue;
    view = r.scope && !can(session, r.scope) ? <NotAllowed scope={r.scope} /> : r.render(params, loc.query);
    break;
  }
  useEffect(() => {
    if (loc.path === '/') navigate('/fleet', { replace: true });
  }, [loc.path]);
  return (
    <div class="shell">
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="topbar">
        <span class="brand">Fleet console</span>
        <nav aria-label="Main">
          <ul>
            {NAV.filter((n) => !n.scope || can(session, n.scope)).map((n) => (
              <li key={n.path}>
                <Link to={n.path} class={loc.path === n.path || loc.path.startsWith(`${n.path}/`) ? 'active' : ''}>
                  {n.label}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          <span class={`live-dot ${state}`} title={`Live updates: ${state}`} role="status" aria-label={`Live updates: ${state}`} />
          <span class="muted small" title={[...session.scopes].join(', ')}>
            {session.keyName}
          </span>
          <button type="button" onClick={onSignOut}>
            Sign out
          </button>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {view ?? <NotFound />}
      </main>
    </div>
  );
}

function NotAllowed({ scope }: { scope: string | readonly string[] }) {
  return (
    <section>
      <h1>Not available with this key</h1>
      <p>This page needs the scope <code>{typeof scope === 'string' ? scope : scope.join(' or ')}</code>. Sign in with a key that has it.</p>
    </section>
  );
}

function NotFound() {
  return (
    <section>
      <h1>Page not found</h1>
      <p>
        <Link to="/fleet">Back to the fleet</Link>
      </p>
    </section>
  );
}
