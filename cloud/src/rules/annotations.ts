/**
 * PATCH /v1/episodes/{id}'s merge of annotations: each key of the patch set to its value, a key
 * set to null removed, every other key kept (a merge patch one level deep: a value that is an
 * object replaces the old one whole). The stores apply it inside their own transaction, on the
 * row they locked.
 */
export function mergeAnnotations(before: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const after = new Map(Object.entries(before));
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) after.delete(key);
    else after.set(key, value);
  }
  // fromEntries defines each key as the object's own property: a key named __proto__ is a key
  // like any other, never the object's prototype.
  return Object.fromEntries(after);
}
