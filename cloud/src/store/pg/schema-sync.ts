/** Filled in with the sync domain. */
export const SYNC_SCHEMA = `
`;
