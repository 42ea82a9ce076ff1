/**
 * The query string of every request: each key and value percent-encoded as a URI component,
 * arrays as a repeated key, undefined and null left out. openapi-fetch's own serializer leaves
 * reserved characters of keys as they are, so a filter key of the API's open families
 * (`metadata.<key>`, `annotation.<key>`) holding `=`, `&`, `#` or `+` reached the server as
 * another key or value.
 */
export function serializeQuery(query: Record<string, unknown> | undefined): string {
  if (!query) return '';
  const parts: string[] = [];
  for (const [key, value] of Object.entries(query)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? (value as unknown[]) : [value]) {
      if (item === undefined || item === null) continue;
      const text = typeof item === 'string' ? item : typeof item === 'number' || typeof item === 'boolean' || typeof item === 'bigint' ? String(item) : JSON.stringify(item);
      parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(text)}`);
    }
  }
  return parts.join('&');
}
