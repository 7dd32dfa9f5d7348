/**
 * Pulls every PromQL expression out of a Grafana dashboard and a Prometheus rules file, with Grafana's
 * template variables replaced the way Grafana would for "All targets", so a real Prometheus can run them.
 *
 * Shared by the dashboard test (against a prom-client fixture) and any end-to-end check against a real
 * `kvcanary serve`: both must run exactly the queries a user's Grafana would.
 * An unknown template variable is an error rather than left in place: Prometheus would reject `$foo`
 * anyway, and the message should name the variable and the panel, not a PromQL parse position.
 */

/** Values substituted for Grafana variables; the defaults stand for "All targets" on a short range. */
export interface TemplateValues {
  [name: string]: string;
}

export const DEFAULT_TEMPLATE_VALUES: Readonly<TemplateValues> = Object.freeze({
  target: '.*',
  __rate_interval: '1m',
  __range: '5m',
  __interval: '15s',
});

export interface DashboardQuery {
  /** `panel` for a panel target, `variable` for a template variable's query turned into PromQL. */
  source: 'panel' | 'variable';
  /** Panel id (panels only). */
  panelId?: number;
  /** Panel title, or the variable's name. */
  title: string;
  refId: string;
  /** The expression as written in the dashboard. */
  rawExpr: string;
  /** The expression with template variables substituted: what Prometheus receives. */
  expr: string;
}

export interface RuleQuery {
  kind: 'alert' | 'record';
  /** Alert name or recorded metric name. */
  name: string;
  group: string;
  expr: string;
}

export class DashboardQueryError extends Error {
  readonly code = 'KVC_DASHBOARD_QUERY';
  constructor(message: string) {
    super(message);
    this.name = 'DashboardQueryError';
  }
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Every panel, including those nested in collapsed rows, in dashboard order. */
export function dashboardPanels(dashboard: unknown): Json[] {
  if (!isObject(dashboard) || !Array.isArray(dashboard.panels)) {
    throw new DashboardQueryError('expected a Grafana dashboard object with a `panels` array');
  }
  const out: Json[] = [];
  for (const panel of dashboard.panels) {
    if (!isObject(panel)) continue;
    out.push(panel);
    if (Array.isArray(panel.panels)) out.push(...panel.panels.filter(isObject));
  }
  return out;
}

const VARIABLE = /\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)/g;

/**
 * Replaces `$name`, `${name}`, `${name:format}` and `[[name]]`. Throws naming the variable when it has
 * no value. `$1`-style regex back-references (label_replace) are left alone.
 */
export function substituteTemplateVariables(expr: string, values: TemplateValues = DEFAULT_TEMPLATE_VALUES, where = 'expression'): string {
  return expr.replace(VARIABLE, (whole, braced?: string, bracketed?: string, bare?: string) => {
    const name = braced ?? bracketed ?? bare ?? '';
    if (/^\d+$/.test(name)) return whole;
    const value = Object.hasOwn(values, name) ? values[name] : undefined;
    if (value === undefined) {
      throw new DashboardQueryError(`${where}: template variable $${name} has no value to substitute (known: ${Object.keys(values).join(', ')})`);
    }
    return value;
  });
}

/** `label_values(metric, label)` → `count by (label) (metric)`, so a variable's options can be checked too. */
function variableQueryToPromQL(query: string): string | undefined {
  const labelValues = /^\s*label_values\(\s*(?:(.+?)\s*,\s*)?(\w+)\s*\)\s*$/s.exec(query);
  if (labelValues) {
    const [, selector, label] = labelValues;
    return `count by (${label}) (${selector ?? `{${label}!=""}`})`;
  }
  const queryResult = /^\s*query_result\((.*)\)\s*$/s.exec(query);
  if (queryResult) return queryResult[1];
  return undefined;
}

/**
 * Every query a user's Grafana would send for this dashboard: each panel target's `expr` and each query
 * variable's query, with template variables substituted from `values` (defaults: all targets, 1m rate
 * interval, 5m range, 15s interval).
 */
export function dashboardQueries(dashboard: unknown, values: Partial<TemplateValues> = {}): DashboardQuery[] {
  const merged: TemplateValues = { ...DEFAULT_TEMPLATE_VALUES };
  for (const [k, v] of Object.entries(values)) if (v !== undefined) merged[k] = v;
  const out: DashboardQuery[] = [];

  const templating = isObject(dashboard) && isObject(dashboard.templating) && Array.isArray(dashboard.templating.list)
    ? dashboard.templating.list.filter(isObject) : [];
  for (const variable of templating) {
    if (variable.type !== 'query') continue;
    const raw = typeof variable.query === 'string' ? variable.query
      : isObject(variable.query) && typeof variable.query.query === 'string' ? variable.query.query : undefined;
    const name = String(variable.name);
    if (raw === undefined) throw new DashboardQueryError(`variable ${name}: no query`);
    const promql = variableQueryToPromQL(raw) ?? raw;
    out.push({ source: 'variable', title: name, refId: name, rawExpr: raw, expr: substituteTemplateVariables(promql, merged, `variable ${name}`) });
  }

  for (const panel of dashboardPanels(dashboard)) {
    if (panel.type === 'row' || !Array.isArray(panel.targets)) continue;
    const title = String(panel.title ?? '');
    const panelId = typeof panel.id === 'number' ? panel.id : undefined;
    for (const target of panel.targets.filter(isObject)) {
      if (target.hide === true) continue;
      const refId = String(target.refId ?? '');
      const where = `panel ${panelId ?? '?'} "${title}" target ${refId}`;
      if (typeof target.expr !== 'string' || target.expr.trim() === '') {
        throw new DashboardQueryError(`${where}: no expr`);
      }
      out.push({ source: 'panel', panelId, title, refId, rawExpr: target.expr, expr: substituteTemplateVariables(target.expr, merged, where) });
    }
  }
  return out;
}

/** Every alerting and recording rule expression of a parsed Prometheus rules file. */
export function ruleQueries(rulesFile: unknown): RuleQuery[] {
  if (!isObject(rulesFile) || !Array.isArray(rulesFile.groups)) {
    throw new DashboardQueryError('expected a Prometheus rules file with a `groups` array');
  }
  const out: RuleQuery[] = [];
  for (const group of rulesFile.groups.filter(isObject)) {
    for (const rule of Array.isArray(group.rules) ? group.rules.filter(isObject) : []) {
      const kind = typeof rule.alert === 'string' ? 'alert' : 'record';
      const name = String(kind === 'alert' ? rule.alert : rule.record);
      if (typeof rule.expr !== 'string') throw new DashboardQueryError(`rule ${name}: no expr`);
      out.push({ kind, name, group: String(group.name), expr: rule.expr.trim() });
    }
  }
  return out;
}

const AGGREGATORS = new Set([
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile',
  'limitk', 'limit_ratio',
]);
const LABEL_LIST_KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const OTHER_KEYWORDS = new Set(['offset', 'bool', 'and', 'or', 'unless', 'atan2', 'inf', 'nan']);

/** Index just past the bracket closing the one at `open`, skipping quoted strings. */
function skipBalanced(expr: string, open: number, openChar: string, closeChar: string): number {
  let depth = 0;
  for (let i = open; i < expr.length; i++) {
    const c = expr[i];
    if (c === '"' || c === "'" || c === '`') {
      i = skipString(expr, i) - 1;
    } else if (c === openChar) {
      depth++;
    } else if (c === closeChar && --depth === 0) {
      return i + 1;
    }
  }
  return expr.length;
}

function skipString(expr: string, start: number): number {
  const quote = expr[start];
  for (let i = start + 1; i < expr.length; i++) {
    if (expr[i] === '\\' && quote !== '`') i++;
    else if (expr[i] === quote) return i + 1;
  }
  return expr.length;
}

function nextNonSpace(expr: string, from: number): number {
  let i = from;
  while (i < expr.length && /\s/.test(expr[i] ?? '')) i++;
  return i;
}

/**
 * Metric names a PromQL expression reads (bare selectors, with or without matchers), in first-seen
 * order. Function and aggregation names, keywords, label lists (`by (...)`), durations, numbers and
 * strings are not metric names. Selectors written only as `{__name__="..."}` are not resolved.
 */
export function metricNames(expr: string): string[] {
  const names = new Set<string>();
  let i = 0;
  while (i < expr.length) {
    const c = expr[i] ?? '';
    if (c === '"' || c === "'" || c === '`') { i = skipString(expr, i); continue; }
    if (c === '#') { const nl = expr.indexOf('\n', i); i = nl === -1 ? expr.length : nl + 1; continue; }
    if (c === '{') { i = skipBalanced(expr, i, '{', '}'); continue; }
    if (c === '[') { i = skipBalanced(expr, i, '[', ']'); continue; }
    if (/[0-9.]/.test(c)) { const m = /^[0-9.][\w.]*/.exec(expr.slice(i)); i += m ? m[0].length : 1; continue; }
    const ident = /^[a-zA-Z_:][\w:]*/.exec(expr.slice(i));
    if (!ident) { i++; continue; }
    const word = ident[0];
    i += word.length;
    const after = nextNonSpace(expr, i);
    if (LABEL_LIST_KEYWORDS.has(word)) {
      if (expr[after] === '(') i = skipBalanced(expr, after, '(', ')');
      continue;
    }
    if (AGGREGATORS.has(word) || OTHER_KEYWORDS.has(word)) continue;
    if (expr[after] === '(') continue; // a function call
    names.add(word);
  }
  return [...names];
}
