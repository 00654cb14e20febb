// The one door to the daemon's REST API: every request goes through apiFetch so that a bearer token
// (from ?token= or asked for after a 401) is attached in one place, and every non-2xx answer becomes an
// ApiError carrying the server's own {"error": "..."} message for the page to show.
//
// Several daemons behind a proxy: a new session is answered by whichever daemon has room, and its
// `Location` names that daemon (absolute under its --public-url). apiFetch remembers it, and every later
// request for that session (/api/sessions/{id}/...) goes there, not to this page's origin; a daemon on
// another origin answers with CORS (serve --cors-origin <this page's origin>).

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

const auth = { token: new URLSearchParams(window.location.search).get('token') };
const SESSION_PATH = /^\/api\/sessions\/([^/?#]+)(.*)$/;
const SESSION_LOCATION = /\/api\/sessions\/([^/?#]+)$/; // after the daemon's --public-url (and its path)
const sessionUrls = new Map(); // session id -> the absolute URL its Location gave

/** Where a request for `path` goes: a known session's own daemon, else this page's origin. */
function routed(path) {
  const match = SESSION_PATH.exec(path);
  const base = match && sessionUrls.get(match[1]);
  return base ? base + match[2] : path;
}

/** A session's own DELETE (answered 204, or 404: gone already) ends what is remembered of it. */
function forgetEnded(path, method, response) {
  const match = SESSION_PATH.exec(path);
  if (match && !match[2] && method === 'DELETE' && (response.ok || response.status === 404)) {
    sessionUrls.delete(match[1]);
  }
}

/** Remember the daemon that holds a session just created (201 + Location /api/sessions/{id}). */
function rememberLocation(response) {
  const location = response.headers.get('Location');
  if (response.status !== 201 || !location) return;
  const url = new URL(location, response.url || window.location.href);
  const match = SESSION_LOCATION.exec(url.pathname);
  if (match) sessionUrls.set(match[1], url.href);
}

export function hasToken() {
  return Boolean(auth.token);
}

async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body && typeof body.error === 'string') {
      return `${body.error} (HTTP ${response.status})`;
    }
  } catch (parseError) {
    // not JSON: fall through to the raw text
  }
  const detail = text.trim().slice(0, 200) || response.statusText;
  return `server answered HTTP ${response.status}: ${detail}`;
}

/**
 * fetch() with auth and error handling. Resolves to the parsed JSON body, or null for empty answers.
 * @param {string} path absolute path such as /api/sessions
 * @param {{method?: string, json?: object, body?: BodyInit, contentType?: string, keepalive?: boolean,
 *          askToken?: boolean, timeoutMs?: number}} options askToken: false answers a 401 without prompting
 *          for a token; timeoutMs: no answer by then counts as unreachable (status 0)
 */
export async function apiFetch(path, options = {}) {
  const { method = 'GET', json, contentType, keepalive = false, timeoutMs } = options;
  const askToken = options.askToken ?? !keepalive;
  const body = json !== undefined ? JSON.stringify(json) : options.body;
  for (let attempt = 0; ; attempt++) {
    const headers = {};
    if (json !== undefined) {
      headers['Content-Type'] = 'application/json';
    } else if (contentType) {
      headers['Content-Type'] = contentType;
    }
    if (auth.token) {
      headers.Authorization = `Bearer ${auth.token}`;
    }
    let response;
    try {
      const signal = timeoutMs ? AbortSignal.timeout(timeoutMs) : undefined;
      response = await fetch(routed(path), { method, body, headers, keepalive, signal });
    } catch (networkError) {
      throw new ApiError(0, `cannot reach the server (${networkError.message})`);
    }
    rememberLocation(response);
    forgetEnded(path, method, response);
    if (response.status === 401 && attempt === 0 && askToken) {
      const token = window.prompt('This server needs an access token:');
      if (token) {
        auth.token = token.trim();
        continue;
      }
    }
    if (!response.ok) {
      throw new ApiError(response.status, await errorMessage(response));
    }
    const type = response.headers.get('Content-Type') || '';
    if (response.status === 204 || !type.includes('json')) {
      return null;
    }
    return response.json();
  }
}

/**
 * The STUN/TURN servers for a new call's RTCPeerConnection (TURN with a fresh short-lived credential):
 * ask just before each call, never cache them.
 */
export async function iceServers() {
  const body = await apiFetch('/api/ice-servers');
  return Array.isArray(body?.iceServers) ? body.iceServers : [];
}
