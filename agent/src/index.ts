// The on-robot agent (recording state machine, outbox, uploader, retention) lands with issue 3;
// the workspace exists now so the build and lint already cover it.
export const AGENT_RUNTIME_VERSION = '0.1.0';
