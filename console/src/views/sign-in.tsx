import { useState } from 'preact/hooks';
import { FleetApiError } from '@fleet/client';
import { openSession, type Session } from '../session.js';
import { ErrorNotice, Field } from '../ui/components.js';

/**
 * Paste an API key. It is checked against the API, then kept in this tab's sessionStorage only
 * (not localStorage, not the URL); the form is a POST-less form, so the key never becomes a
 * query string either.
 */
export function SignIn({ message, onSignedIn }: { message: string | null; onSignedIn: (s: Session) => void }) {
  const [key, setKey] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(undefined);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      onSignedIn(await openSession(key.trim()));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const invalid = error instanceof FleetApiError && error.status === 401;
  return (
    <main class="sign-in" id="main">
      <h1>Fleet console</h1>
      <p class="muted">Sign in with an API key of your organization (<code>ak_…</code>). It stays in this browser tab only and is forgotten when you sign out or close the tab.</p>
      {message ? (
        <div class="notice warn" role="alert">
          {message}
        </div>
      ) : null}
      <form onSubmit={(e) => void submit(e)} autoComplete="off">
        <Field label="API key" id="api-key" error={invalid ? 'This key is not valid: it is unknown, revoked or expired.' : undefined}>
          <input id="api-key" name="api-key" type="password" value={key} onInput={(e) => setKey(e.currentTarget.value)} required autoComplete="off" spellcheck={false} aria-invalid={invalid} />
        </Field>
        <button type="submit" class="primary" disabled={busy || key.trim() === ''}>
          {busy ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
      {invalid ? null : <ErrorNotice error={error} action="Sign-in" />}
    </main>
  );
}
