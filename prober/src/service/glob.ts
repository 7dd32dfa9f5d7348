/**
 * The `*` patterns of silence targets (`glm/*`, `*-canary`), matched in linear time. A pattern was once
 * turned into a RegExp (`.*` per star), and a backtracking engine takes exponential time on patterns like
 * `*a*a*a*a*b` against a name of a's: in `serve` that blocked the event loop for seconds. This is the greedy
 * two-pointer wildcard match: at most one remembered star, so O(pattern × name) in the worst case and
 * O(pattern + name) in the usual one. `*` matches any run of characters (including `/`); everything else
 * matches itself.
 */
export function globMatch(pattern: string, name: string): boolean {
  let p = 0;
  let n = 0;
  let star = -1;
  let resume = 0;
  while (n < name.length) {
    if (p < pattern.length && pattern[p] !== '*' && pattern[p] === name[n]) {
      p++;
      n++;
    } else if (p < pattern.length && pattern[p] === '*') {
      star = p++;
      resume = n;
    } else if (star >= 0) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}
