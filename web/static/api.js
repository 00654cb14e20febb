// The one door to the daemon's REST API: every request goes through apiFetch so that a bearer token
// (from ?token= or asked for after a 401) is attached in one place, and every non-2xx answer becomes an
// ApiError carrying the server's own {"error": "..."} message for the page to show.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

const auth = { token: new URLSearchParams(window.location.search).get('token') };

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
 * @param {{method?: string, json?: object, body?: BodyInit, contentType?: string, keepalive?: boolean}} options
 */
export async function apiFetch(path, options = {}) {
  const { method = 'GET', json, contentType, keepalive = false } = options;
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
      response = await fetch(path, { method, body, headers, keepalive });
    } catch (networkError) {
      throw new ApiError(0, `cannot reach the server (${networkError.message})`);
    }
    if (response.status === 401 && attempt === 0 && !keepalive) {
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
