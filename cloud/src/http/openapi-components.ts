const SCHEMA_REF = '#/components/schemas/';

/**
 * The document without the component schemas nothing refers to. fastify-type-provider-zod
 * emits every registered schema twice, `X` for responses and `XInput` for request bodies, so
 * a schema only ever sent has an `XInput` no operation uses (and one only ever received an
 * `X`); client generators would make a type of each.
 */
export function withoutUnusedSchemas<T extends object>(doc: T): T {
  const { components, ...rest } = doc as { components?: { schemas?: Record<string, unknown> } };
  const schemas = components?.schemas;
  if (!components || !schemas) return doc;
  const used = new Set<string>();
  const pending: unknown[] = [rest, ...Object.entries(components).filter(([k]) => k !== 'schemas').map(([, v]) => v)];
  while (pending.length > 0) {
    const node = pending.pop();
    if (Array.isArray(node)) {
      pending.push(...(node as unknown[]));
    } else if (typeof node === 'object' && node !== null) {
      for (const [key, value] of Object.entries(node)) {
        if (key === '$ref' && typeof value === 'string' && value.startsWith(SCHEMA_REF)) {
          const name = decodeURIComponent(value.slice(SCHEMA_REF.length)).replace(/~1/g, '/').replace(/~0/g, '~');
          if (!used.has(name)) {
            used.add(name);
            pending.push(schemas[name]);
          }
        } else {
          pending.push(value);
        }
      }
    }
  }
  const kept = Object.fromEntries(Object.entries(schemas).filter(([name]) => used.has(name)));
  return { ...doc, components: { ...components, schemas: kept } };
}
