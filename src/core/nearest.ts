/** Did-you-mean support: the closest spelling among known names. */

/** Edit distance (insertions, deletions, substitutions) between two short strings. */
export function editDistance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}

/**
 * The known name closest to `name` (case-insensitive; a prefix either way counts as close), if it is
 * close enough to be a likely slip rather than a different word.
 */
export function nearest(name: string, known: Iterable<string>): string | undefined {
  const lower = name.toLowerCase();
  let best: { key: string; d: number } | undefined;
  for (const key of known) {
    const k = key.toLowerCase();
    const d = k === lower ? 0 : k.startsWith(lower) || lower.startsWith(k) ? 1 : editDistance(lower, k);
    if (!best || d < best.d) best = { key, d };
  }
  return best && best.d <= Math.max(2, Math.floor(name.length / 3)) ? best.key : undefined;
}
