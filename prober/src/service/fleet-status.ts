/** The status page's fleet section: this replica's shard and each discovery source's state. */
import type { FleetStatus } from './fleet.js';
import { escapeHtml } from './server.js';

export function renderFleetSection(s: FleetStatus): string {
  const rows = s.sources.map((src) => {
    const state = src.lastError === undefined
      ? `<span class="badge pass" title="last resolve succeeded">OK</span>`
      : `<span class="badge fail" title="the last resolve failed: the last good list is kept">FAILING</span> ${escapeHtml(src.lastError)}${src.lastErrorAt === undefined ? '' : ` (at ${escapeHtml(src.lastErrorAt)})`}`;
    return `<tr><td>${escapeHtml(src.source)}</td><td>${escapeHtml(src.description)}</td><td>${src.addresses}</td><td>${state}</td><td>${escapeHtml(src.lastOkAt ?? 'never')}</td><td>${src.errors}</td></tr>`;
  });
  const table = rows.length === 0 ? '' : `<table><thead><tr><th>source</th><th>from</th><th>addresses</th><th>state</th><th>last good</th><th>errors</th></tr></thead><tbody>
${rows.join('\n')}
</tbody></table>`;
  return `<section><h2>Fleet <small>shard ${escapeHtml(s.shard)} · probing ${s.targets} target${s.targets === 1 ? '' : 's'}</small></h2>
<p>Discovery sources (targets are named SOURCE/HOST:PORT; <a href="api/targets">/api/targets</a> lists this shard's).</p>
${table}</section>
`;
}
