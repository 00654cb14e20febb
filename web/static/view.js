// The viewer page (/view/{id}): only the swapped video of one session, full-bleed, for an OBS Browser
// Source. It plays the session through WHEP (POST /whep/{id}, recvonly offer with its candidates) and
// reconnects on its own: when the session is not there yet, when the peer fails, or when a publisher
// restarts (the id "latest" follows the newest WHIP stream). ?token= is sent as a bearer token. Its peer
// uses the daemon's STUN/TURN servers (GET /api/ice-servers); behind a proxy, open the viewer on the host
// of the daemon that holds the session (its WHIP or session Location).
// window.livefuseViewer exposes the state for tests: {state, connects, viewerUrl}.

const RETRY_MS = [500, 1000, 2000];
const GATHER_TIMEOUT_MS = 2000;
const DISCONNECTED_GRACE_MS = 3000;
// a stream that ended on the server (publisher gone) shows as ICE 'disconnected' only after ~5 s of
// silence; no decoded frame for this long while playing means the same, sooner
const STALL_MS = 2500;
const STALL_CHECK_MS = 500;

const params = new URLSearchParams(window.location.search);
const token = params.get('token');
const sessionId = decodeURIComponent(window.location.pathname.split('/').filter(Boolean).pop() || '');
const video = document.getElementById('viewer-video');
const stateLabel = document.getElementById('viewer-state');
const status = { state: 'connecting', connects: 0, viewerUrl: null, lastError: null };
window.livefuseViewer = status;

let pc = null;
let failures = 0;
let retryTimer = null;

function setState(state, detail = '') {
  status.state = state;
  document.body.dataset.state = state;
  stateLabel.textContent = detail ? `${state}: ${detail}` : state;
}

function authHeaders(extra = {}) {
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

function waitForGathering(peer) {
  if (peer.iceGatheringState === 'complete') {
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, GATHER_TIMEOUT_MS);
    peer.addEventListener('icegatheringstatechange', () => {
      if (peer.iceGatheringState === 'complete') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}

async function hangUp() {
  const viewerUrl = status.viewerUrl;
  status.viewerUrl = null;
  if (pc) {
    pc.close();
    pc = null;
  }
  if (viewerUrl) {
    try {
      await fetch(viewerUrl, { method: 'DELETE', headers: authHeaders(), keepalive: true });
    } catch (error) {
      // the server may be gone already: nothing to free then
    }
  }
}

function retryLater(reason) {
  if (retryTimer !== null) {
    return; // one reconnect at a time, whatever reported the loss
  }
  const delay = RETRY_MS[Math.min(failures, RETRY_MS.length - 1)];
  failures += 1;
  status.lastError = reason;
  setState('waiting', reason);
  hangUp(); // the old peer's late events no longer match `pc`
  retryTimer = setTimeout(() => {
    retryTimer = null;
    connect();
  }, delay);
}

/** The daemon's STUN/TURN servers (a fresh TURN credential each time); none when it cannot say. */
async function iceServers() {
  try {
    const response = await fetch('/api/ice-servers', { headers: authHeaders(), cache: 'no-store' });
    if (response.ok) {
      const body = await response.json();
      return Array.isArray(body.iceServers) ? body.iceServers : [];
    }
  } catch (error) {
    // the WHEP request below reports what is wrong with the server
  }
  return [];
}

async function connect() {
  await hangUp();
  setState('connecting');
  const peer = new RTCPeerConnection({ iceServers: await iceServers() });
  pc = peer;
  peer.addTransceiver('video', { direction: 'recvonly' });
  peer.addTransceiver('audio', { direction: 'recvonly' });
  peer.addEventListener('track', (event) => {
    if (event.track.kind === 'video') {
      video.srcObject = event.streams[0] || new MediaStream([event.track]);
      video.play().catch(() => {
        video.muted = true; // autoplay with sound refused: keep the picture
        video.play().catch(() => {});
      });
    }
  });
  peer.addEventListener('connectionstatechange', () => {
    if (pc !== peer) {
      return;
    }
    if (peer.connectionState === 'connected') {
      failures = 0;
      status.connects += 1;
      setState('playing');
    } else if (peer.connectionState === 'failed' || peer.connectionState === 'closed') {
      retryLater(`connection ${peer.connectionState}`);
    } else if (peer.connectionState === 'disconnected') {
      // the server ended the session (or the network blinked): give it a moment, then start over
      setTimeout(() => {
        if (pc === peer && peer.connectionState === 'disconnected') {
          retryLater('connection lost');
        }
      }, DISCONNECTED_GRACE_MS);
    }
  });
  try {
    await peer.setLocalDescription(await peer.createOffer());
    await waitForGathering(peer);
    const response = await fetch(`/whep/${encodeURIComponent(sessionId)}`, {
      method: 'POST',
      headers: authHeaders({ 'Content-Type': 'application/sdp' }),
      body: peer.localDescription.sdp,
    });
    if (response.status !== 201) {
      throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
    }
    const location = response.headers.get('Location');
    status.viewerUrl = location ? new URL(location, window.location.href).href : null;
    if (pc !== peer) {
      await hangUp();
      return;
    }
    await peer.setRemoteDescription({ type: 'answer', sdp: await response.text() });
  } catch (error) {
    if (pc === peer) {
      retryLater(error.message);
    }
  }
}

let lastDecoded = { peer: null, frames: -1, since: 0 };

async function checkStall() {
  const peer = pc;
  if (!peer || status.state !== 'playing') {
    return;
  }
  let frames = 0;
  (await peer.getStats()).forEach((report) => {
    if (report.type === 'inbound-rtp' && report.kind === 'video') {
      frames = report.framesDecoded || 0;
    }
  });
  const now = performance.now();
  if (lastDecoded.peer !== peer || frames !== lastDecoded.frames) {
    lastDecoded = { peer, frames, since: now };
  } else if (now - lastDecoded.since > STALL_MS && pc === peer) {
    retryLater('stream stalled');
  }
}

setInterval(() => {
  checkStall().catch(() => {});
}, STALL_CHECK_MS);
window.addEventListener('pagehide', () => {
  hangUp();
});
connect();
