/** A store part not yet built on PostgreSQL: every method rejects, saying which. */
export function unfinished<T extends object>(name: string): T {
  return new Proxy({} as T, {
    get: (_target, prop) => prop === 'then' ? undefined : () => Promise.reject(new Error(`${name}.${String(prop)} is not implemented on PostgreSQL yet`)),
  });
}
