/** Filled in with the webhooks domain. */
export const WEBHOOKS_SCHEMA = `
`;
