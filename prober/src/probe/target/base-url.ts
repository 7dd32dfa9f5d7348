/**
 * Where a target's endpoints live. Users paste the server root or the OpenAI base (`…/v1`), with or without
 * a trailing slash, sometimes behind a path prefix (`https://gw/llama/v1`). OpenAI routes hang off
 * `<root>/v1`; the engines' native routes (/tokenize, /props, /get_server_info, /metrics) off `<root>`.
 */
import { InvalidTargetArgError } from './errors.js';

export interface TargetUrls {
  /** Server root without trailing slash, e.g. `http://127.0.0.1:8000` or `https://gw/llama`. */
  root: string;
}

export function parseBaseUrl(input: unknown, field = 'baseUrl'): TargetUrls {
  if (typeof input !== 'string' || input.trim() === '') {
    throw new InvalidTargetArgError(field, 'an http(s) URL such as `http://127.0.0.1:8000`', input);
  }
  let url: URL;
  try {
    url = new URL(input.trim());
  } catch {
    throw new InvalidTargetArgError(field, 'an absolute http(s) URL such as `http://127.0.0.1:8000`', input);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidTargetArgError(field, 'an http: or https: URL', `a URL with scheme ${url.protocol}`);
  }
  // Credentials in the URL would travel in logs and in every result that names the target.
  if (url.username !== '' || url.password !== '') {
    throw new InvalidTargetArgError(field, 'a URL without user:password (pass the key with apiKey or headers)', 'a URL with credentials');
  }
  if (url.search !== '' || url.hash !== '') {
    throw new InvalidTargetArgError(field, 'a URL without query or fragment', 'a URL with a query or fragment');
  }
  let path = url.pathname.replace(/\/+$/, '');
  if (/\/v1$/i.test(path)) path = path.slice(0, -3);
  return { root: `${url.protocol}//${url.host}${path}` };
}
