// Simulated fleets that drive the real agent arrive with issue 3.
export { AGENT_RUNTIME_VERSION } from '@fleet/agent';
