/** Filled in with the episodes domain. */
export const EPISODES_SCHEMA = `
`;
