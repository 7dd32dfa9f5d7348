/**
 * `external_url:` the status page's address as on-call reaches it (through an ingress, a proxy, a port-forward
 * name), e.g. `https://kvcanary-{shard}.example.com/`. `{shard}` becomes the shard index (0-based), since every
 * shard serves its own page. Alerts carry it as the `status_page` label of kvcanary_open_findings (and the
 * fleet dashboard links it from kvcanary_target_info), anchored at the target's section: `…/#target-NAME`.
 *
 * Validated like any config value: an absolute http or https URL, at most 512 characters, no credentials
 * (the value goes into metric labels, alerts and notifications), no query or fragment (the anchor is added).
 * A bad value is described, never echoed: it may carry a password.
 */
export const MAX_EXTERNAL_URL = 512;

/** The validated template (ending in `/`), or a message saying what is wrong with it. */
export function parseExternalUrl(raw: unknown): { url: string } | { error: string } {
  if (typeof raw !== 'string' || raw.trim() === '') return { error: 'expected the status page\'s URL, such as https://kvcanary-{shard}.example.com/' };
  const s = raw.trim();
  if (s.length > MAX_EXTERNAL_URL) return { error: `at most ${MAX_EXTERNAL_URL} characters` };
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0020\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069"<>\\^`{|}]/.test(s.replaceAll('{shard}', ''))) {
    return { error: 'expected a URL without spaces, control characters or quotes (`{shard}` is the only placeholder)' };
  }
  let u: URL;
  try {
    u = new URL(s.replaceAll('{shard}', '0'));
  } catch {
    return { error: 'expected an absolute URL such as https://kvcanary.example.com/ (not shown: it did not parse)' };
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return { error: 'expected an http:// or https:// URL' };
  if (u.username !== '' || u.password !== '') return { error: 'credentials are not allowed in the URL (it goes into alerts and metric labels; not shown)' };
  if (u.search !== '' || u.hash !== '' || s.includes('?') || s.includes('#')) return { error: 'expected no query or fragment: the target\'s anchor is added to it' };
  if (s.replaceAll('{shard}', '').includes('{') || s.replaceAll('{shard}', '').includes('}')) return { error: 'the only placeholder is {shard}' };
  return { url: s.endsWith('/') ? s : `${s}/` };
}

/** The anchor of a target's section on the status page. */
export function targetAnchor(target: string): string {
  return `target-${encodeURIComponent(target)}`;
}

/** A target's section on its shard's status page. */
export function statusPageUrl(template: string, shardIndex: number, target: string): string {
  return `${template.replaceAll('{shard}', String(shardIndex))}#${targetAnchor(target)}`;
}
