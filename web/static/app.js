// livefuse page: camera -> canvas (stamped if measuring) -> WebRTC -> daemon (face swap) -> swapped video back,
// with a source-photo upload, live settings and stats. Standard APIs only (current Chrome and Firefox).
import { apiFetch, iceServers } from './api.js';
import { applyCapabilities, loadCapabilities } from './capabilities.js';
import { LatencyWindow, StampReader, startLatencyReadout, startStamping } from './stamp.js';
import {
  formatCadence,
  formatNumber as fmt,
  formatProcessing,
  formatSending,
  summariseRtp,
  videoRtpReports,
} from './stats.js';

const CAPTURE_FPS = 30;
const ICE_GATHERING_TIMEOUT_MS = 5000;
const STATS_INTERVAL_MS = 1000;
// The daemon serving a call is gone when its session stats fail this many polls in a row (a second
// apart) with no answer or a proxy's 502/503/504 (a 404 is a live daemon that ended the call: endedByServer):
// the page then opens a new call through the same entry (a proxy sends it to a live daemon) and sends
// its source photo, reference and settings again. Within 3 s of the daemon's death.
const FAILOVER_AFTER_FAILURES = 2;
const GONE_STATUSES = [0, 502, 503, 504];
const SERVER_TIMEOUT_MS = 900; // a stats poll not answered by then counts as a failure
const SETTING_NAMES = ['engine', 'face_selector', 'enhancer', 'swap_enabled', 'mouth_mask', 'occlusion', 'latency_stamp'];

const $ = (id) => document.getElementById(id);
const ui = {
  start: $('start-button'),
  stop: $('stop-button'),
  callState: $('call-state'),
  errorBanner: $('error-banner'),
  errorText: $('error-text'),
  localVideo: $('local-video'),
  remoteVideo: $('remote-video'),
  sendCanvas: $('send-canvas'),
  sourceDrop: $('source-drop'),
  sourceInput: $('source-input'),
  sourceThumb: $('source-thumb'),
  sourceHint: $('source-hint'),
  sourceStatus: $('source-status'),
  sourceClear: $('source-clear'),
  settingsForm: $('settings-form'),
};

// Everything one call owns; replaced on each start so a stopped call cannot leak into the next.
let call = null;
let sourceFile = null;
let referenceFile = null;
const dirtySettings = {}; // settings the user changed before a session existed
// Frames are stamped only once the session has taken `latency_stamp: true`: from then on the daemon keeps
// the stamp off what others watch, so no stamped frame reaches a viewer before the daemon knows.
let stampConfirmed = false;
const latency = new LatencyWindow();
const stampReader = new StampReader($('stamp-canvas'));

// Read by the browser test and handy in the console.
window.livefuse = { latency, stats: {}, server: null, sessionId: null, capabilities: null, failovers: [] };

// ---- feedback ------------------------------------------------------------------------------------

function showError(message) {
  ui.errorText.textContent = message;
  ui.errorBanner.hidden = false;
  console.error('livefuse:', message);
}

function clearError() {
  ui.errorBanner.hidden = true;
  ui.errorText.textContent = '';
}

function setCallState(state) {
  ui.callState.textContent = state;
  ui.callState.dataset.state = state;
  const active = !['idle', 'failed', 'closed', 'ended'].includes(state);
  ui.start.disabled = active;
  ui.stop.disabled = !active;
}

function setStat(id, text) {
  $(id).textContent = text;
}

function cameraErrorMessage(error) {
  switch (error.name) {
    case 'NotAllowedError':
      return 'Camera permission was denied: allow camera access for this page and press Start again.';
    case 'NotFoundError':
    case 'OverconstrainedError':
      return 'No usable camera was found.';
    case 'NotReadableError':
      return 'The camera is in use by another application.';
    default:
      return `Cannot open the camera: ${error.message || error.name}`;
  }
}

// ---- WebRTC --------------------------------------------------------------------------------------

function preferVp8(transceiver) {
  if (!transceiver.setCodecPreferences || !RTCRtpReceiver.getCapabilities) return;
  const codecs = RTCRtpReceiver.getCapabilities('video')?.codecs ?? [];
  const isVp8 = (codec) => codec.mimeType.toLowerCase() === 'video/vp8';
  const ordered = [...codecs.filter(isVp8), ...codecs.filter((codec) => !isVp8(codec))];
  if (ordered.length && isVp8(ordered[0])) {
    transceiver.setCodecPreferences(ordered);
  }
}

/** Without this Chrome trades resolution for frame rate and the server sees 480x360. */
async function maintainResolution(sender) {
  try {
    const parameters = sender.getParameters();
    parameters.degradationPreference = 'maintain-resolution';
    await sender.setParameters(parameters);
  } catch (error) {
    console.warn('livefuse: degradationPreference not supported here:', error);
  }
}

function iceGatheringComplete(pc) {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(done, ICE_GATHERING_TIMEOUT_MS);
    function done() {
      clearTimeout(timer);
      pc.removeEventListener('icegatheringstatechange', onChange);
      resolve();
    }
    function onChange() {
      if (pc.iceGatheringState === 'complete') done();
    }
    pc.addEventListener('icegatheringstatechange', onChange);
  });
}

/** What the camera is asked for: the "Camera" setting (480p / 720p / 1080p; 720p unless changed). */
function cameraConstraints() {
  const [width, height] = ui.settingsForm.elements.camera_resolution.value.split('x').map(Number);
  return { width: { ideal: width }, height: { ideal: height }, frameRate: { ideal: CAPTURE_FPS } };
}

async function openCamera() {
  try {
    return await navigator.mediaDevices.getUserMedia({ audio: false, video: cameraConstraints() });
  } catch (error) {
    throw new Error(cameraErrorMessage(error));
  }
}

/** A new "Camera" choice during a call: the running camera is asked again (the call goes on). */
async function applyCameraResolution() {
  const track = call?.camera?.getVideoTracks()[0];
  if (!track) return;
  try {
    await track.applyConstraints(cameraConstraints());
  } catch (error) {
    showError(`The camera cannot do ${ui.settingsForm.elements.camera_resolution.value}: ${error.message || error.name}`);
  }
}

function formatResolution(size) {
  return size ? `${size.width}x${size.height}` : '–';
}

async function startCall({ quietStop = false } = {}) {
  if (call) await stopCall('idle', { quiet: quietStop }); // a failed call still holds its camera and session
  clearError();
  setCallState('starting');
  const current = { pc: null, camera: null, sessionId: null, stoppers: [], timer: null, previous: {} };
  call = current;
  try {
    current.camera = await openCamera();
    ui.localVideo.srcObject = current.camera;
    await ui.localVideo.play();
    if (!ui.localVideo.videoWidth) {
      await new Promise((resolve) => ui.localVideo.addEventListener('loadedmetadata', resolve, { once: true }));
    }
    current.stoppers.push(startStamping(ui.localVideo, ui.sendCanvas, stamping));
    const outgoing = ui.sendCanvas.captureStream(CAPTURE_FPS);

    const pc = new RTCPeerConnection({ iceServers: await iceServers() });
    window.livefuse.iceServers = pc.getConfiguration().iceServers;
    current.pc = pc;
    const transceiver = pc.addTransceiver(outgoing.getVideoTracks()[0], {
      direction: 'sendrecv',
      streams: [outgoing],
    });
    preferVp8(transceiver);
    pc.addEventListener('track', (event) => {
      ui.remoteVideo.srcObject = event.streams[0] ?? new MediaStream([event.track]);
      current.stoppers.push(
        startLatencyReadout(ui.remoteVideo, stampReader, latency, ui.sendCanvas, measuring),
      );
    });
    pc.addEventListener('connectionstatechange', () => {
      if (call !== current || current.ended) return;
      setCallState(pc.connectionState);
      if (pc.connectionState === 'failed') {
        showError('The connection to the server failed (ICE/DTLS). Press Stop, then Start to retry.');
      }
    });

    await pc.setLocalDescription(await pc.createOffer());
    await iceGatheringComplete(pc);
    await maintainResolution(transceiver.sender);
    const answer = await apiFetch('/api/sessions', {
      method: 'POST',
      json: { sdp: pc.localDescription.sdp, type: 'offer' },
    });
    current.sessionId = answer.id;
    window.livefuse.sessionId = answer.id;
    await pc.setRemoteDescription({ type: answer.type, sdp: answer.sdp });
    if (call !== current) return; // stopped while we waited
    setCallState(pc.connectionState === 'new' ? 'connecting' : pc.connectionState);
    current.timer = setInterval(() => refreshStats(current), STATS_INTERVAL_MS);
    await showCapabilities(!window.livefuse.capabilities); // the token is known now
    await syncSettings(current);
    if (sourceFile) await uploadSource(sourceFile);
    if (referenceFile) await uploadReference(referenceFile);
  } catch (error) {
    showError(error.message);
    if (call === current) await stopCall();
  }
}

async function stopCall(finalState = 'idle', { quiet = false } = {}) {
  const current = call;
  call = null;
  setCallState(finalState);
  if (!current) return;
  clearInterval(current.timer);
  current.stoppers.forEach((stop) => stop());
  if (current.sessionId && quiet) {
    // its daemon is gone: tell it anyway, should it be back, but do not wait for an answer
    apiFetch(`/api/sessions/${current.sessionId}`, { method: 'DELETE', timeoutMs: SERVER_TIMEOUT_MS }).catch(() => {});
  } else if (current.sessionId) {
    try {
      await apiFetch(`/api/sessions/${current.sessionId}`, { method: 'DELETE' });
    } catch (error) {
      if (error.status !== 404) showError(error.message);
    }
  }
  current.pc?.close();
  current.camera?.getTracks().forEach((track) => track.stop());
  ui.localVideo.srcObject = null;
  ui.remoteVideo.srcObject = null;
  window.livefuse.sessionId = null;
  stampConfirmed = false;
  latency.clear();
}

// ---- stats ---------------------------------------------------------------------------------------

async function refreshStats(current) {
  if (!current.pc) return;
  const snapshot = videoRtpReports(await current.pc.getStats());
  const rtp = summariseRtp(snapshot, current.previous);
  current.previous = snapshot;
  const p50 = latency.percentile(0.5);
  const p95 = latency.percentile(0.95);
  window.livefuse.stats = { ...rtp, latencyP50: p50, latencyP95: p95 };
  if (!measuring()) {
    setStat('stat-latency', 'off (tick "measure latency")');
  } else {
    setStat('stat-latency', p50 === null ? '–' : `${fmt(p50)} / ${fmt(p95)} ms`);
  }
  setStat('stat-fps', `${fmt(rtp.fpsSent, 1)} / ${fmt(rtp.fpsReceived, 1)}`);
  setStat('stat-frames-decoded', String(rtp.framesDecoded));
  setStat('stat-bitrate', `${fmt(rtp.kbitsIn)} / ${fmt(rtp.kbitsOut)} kbit/s`);
  setStat('stat-jitter', fmt(rtp.jitterMs, 1, ' ms'));
  const asked = ui.settingsForm.elements.camera_resolution.value;
  const camera = ui.localVideo.videoWidth ? `${ui.localVideo.videoWidth}x${ui.localVideo.videoHeight}` : '–';
  setStat('stat-camera', `${camera} (asked ${asked})`);
  await refreshServerStats(current);
}

async function refreshServerStats(current) {
  if (!current.sessionId || current.failingOver) return;
  try {
    const server = await apiFetch(`/api/sessions/${current.sessionId}`, { timeoutMs: SERVER_TIMEOUT_MS });
    if (call !== current) return;
    current.serverFailures = 0;
    window.livefuse.server = server;
    setStat('stat-server-frames', `${server.frames_in} / ${server.frames_out} / ${server.frames_dropped}`);
    setStat('stat-server-fps', `${fmt(server.fps_in, 1)} / ${fmt(server.fps_out, 1)}`);
    setStat('stat-resolution', `${formatResolution(server.resolution_in)} / ${formatResolution(server.resolution_out)}`);
    setStat('stat-processing', formatProcessing(server.processing_ms));
    setStat('stat-cadence', formatCadence(server.quality));
    setStat('stat-server-sending', formatSending(server.sending));
  } catch (error) {
    if (call !== current) return;
    if (error.status === 404) {
      endedByServer(current, error.message);
      return;
    }
    if (!GONE_STATUSES.includes(error.status)) {
      showError(error.message);
      return;
    }
    current.serverFailures = (current.serverFailures ?? 0) + 1;
    if (current.serverFailures >= FAILOVER_AFTER_FAILURES && !current.failingOver) {
      await failOver(current, error.message);
    }
  }
}

/** The daemon of `current` is gone: a new call through the same entry, with the same inputs. */
async function failOver(current, reason) {
  current.failingOver = true;
  const record = { from: current.sessionId, reason, at: performance.now(), to: null };
  window.livefuse.failovers.push(record);
  console.warn('livefuse: the server of this call is gone (%s); calling again', reason);
  setCallState('reconnecting');
  await startCall({ quietStop: true });
  record.to = call?.sessionId ?? null;
  record.resumedAt = performance.now();
}

/** The daemon closed this call (its frames kept failing, it went idle, it shut down): say so, free the
 * camera, and never leave the header saying "connected" over a frozen video. */
function endedByServer(current, message) {
  current.ended = true;
  current.sessionId = null; // nothing to DELETE: the server has forgotten it
  showError(`The server ended this call: ${message}. Press Start for a new one.`);
  stopCall('ended');
}

// ---- source photo --------------------------------------------------------------------------------

/** The thumbnail shows `file` (null: the drop hint); it names the file for the user and the tests. */
function showThumb(file) {
  if (ui.sourceThumb.src) URL.revokeObjectURL(ui.sourceThumb.src);
  if (!file) {
    ui.sourceThumb.removeAttribute('src');
    delete ui.sourceThumb.dataset.file;
    ui.sourceThumb.hidden = true;
    ui.sourceHint.hidden = false;
    ui.sourceClear.disabled = true;
    return;
  }
  ui.sourceThumb.src = URL.createObjectURL(file);
  ui.sourceThumb.dataset.file = file.name;
  ui.sourceThumb.title = file.name;
  ui.sourceThumb.hidden = false;
  ui.sourceHint.hidden = true;
  ui.sourceClear.disabled = false;
}

function chooseSource(file) {
  if (!file) return;
  if (!file.type.startsWith('image/')) {
    showError(`"${file.name}" is not an image.`);
    return;
  }
  clearError();
  if (call?.sessionId) {
    uploadSource(file); // the thumbnail changes only once the server has taken the photo
  } else {
    sourceFile = file;
    showThumb(file);
    ui.sourceStatus.textContent = 'will be sent when the call starts';
  }
}

/**
 * PUT the photo. On success it is the source (thumbnail, `sourceFile`) and an old error goes away; on a
 * rejection the server keeps swapping the previous source, so the thumbnail shows that one again.
 */
async function uploadSource(file) {
  const sessionId = call?.sessionId;
  if (!sessionId) return;
  const previous = file === sourceFile ? null : sourceFile; // a pending photo sent at start has no older one
  ui.sourceStatus.textContent = 'uploading…';
  try {
    const answer = await apiFetch(`/api/sessions/${sessionId}/source`, {
      method: 'PUT',
      body: file,
      contentType: file.type,
    });
    const { width, height } = answer.source;
    sourceFile = file;
    showThumb(file);
    clearError();
    ui.sourceStatus.textContent = `source set (${width}x${height})`;
    ui.sourceStatus.dataset.state = 'set';
  } catch (error) {
    sourceFile = previous;
    showThumb(previous);
    ui.sourceInput.value = '';
    ui.sourceStatus.textContent = previous
      ? `"${file.name}" not accepted; still swapping "${previous.name}"`
      : `"${file.name}" not accepted`;
    ui.sourceStatus.dataset.state = 'rejected';
    showError(error.status === 422 ? `No face found in "${file.name}": ${error.message}` : error.message);
  }
}

async function clearSource() {
  sourceFile = null;
  ui.sourceInput.value = '';
  showThumb(null);
  ui.sourceStatus.textContent = '';
  delete ui.sourceStatus.dataset.state;
  if (!call?.sessionId) return;
  try {
    await apiFetch(`/api/sessions/${call.sessionId}/source`, { method: 'DELETE' });
  } catch (error) {
    showError(error.message);
  }
}

/** The face `Faces: reference` swaps; kept and sent when a call starts, like the source. */
async function uploadReference(file) {
  const status = $('reference-status');
  referenceFile = file;
  const sessionId = call?.sessionId;
  if (!sessionId) {
    status.textContent = 'will be sent when the call starts';
    return;
  }
  try {
    await apiFetch(`/api/sessions/${sessionId}/reference`, { method: 'PUT', body: file, contentType: file.type });
    status.textContent = 'reference set';
  } catch (error) {
    status.textContent = 'not accepted';
    showError(error.status === 422 ? `No face found in "${file.name}": ${error.message}` : error.message);
  }
}

// ---- settings ------------------------------------------------------------------------------------

/** The latency stamp is opt-in: only while "measure latency" is ticked are frames stamped and read. */
function measuring() {
  return readSetting('latency_stamp');
}

/** Stamp only what the session knows is stamped (see `stampConfirmed`). */
function stamping() {
  return measuring() && stampConfirmed;
}

function readSetting(name) {
  const field = ui.settingsForm.elements[name];
  return field.type === 'checkbox' ? field.checked : field.value;
}

function showSettings(settings) {
  if ('latency_stamp' in settings) stampConfirmed = Boolean(settings.latency_stamp);
  for (const name of SETTING_NAMES) {
    const field = ui.settingsForm.elements[name];
    if (!(name in settings)) continue;
    if (field.type === 'checkbox') {
      field.checked = Boolean(settings[name]);
    } else {
      field.value = settings[name];
    }
  }
}

async function patchSettings(sessionId, changes) {
  try {
    showSettings(await apiFetch(`/api/sessions/${sessionId}/settings`, { method: 'PATCH', json: changes }));
  } catch (error) {
    showError(error.message);
    if (error.status !== 409) return;
    // refused (not available on this daemon): the call goes on as it was; show what is in effect
    for (const name of Object.keys(changes)) delete dirtySettings[name];
    try {
      const session = await apiFetch(`/api/sessions/${sessionId}`);
      if (session?.settings) showSettings(session.settings);
    } catch (refreshError) {
      console.warn('livefuse: settings not refreshed:', refreshError.message);
    }
  }
}

/** Offer only what this daemon can run (GET /api/capabilities); `reload` asks again. */
async function showCapabilities(reload, askToken = true) {
  if (reload) window.livefuse.capabilities = await loadCapabilities({ askToken });
  applyCapabilities(ui.settingsForm, window.livefuse.capabilities, $('capabilities-status'));
}

/** On a new session: the server's defaults win, except what the user changed before starting. */
async function syncSettings(current) {
  if (Object.keys(dirtySettings).length) {
    await patchSettings(current.sessionId, { ...dirtySettings });
  } else {
    const session = await apiFetch(`/api/sessions/${current.sessionId}`);
    if (session?.settings) showSettings(session.settings);
  }
}

function onSettingChanged(event) {
  const name = event.target.name;
  if (name === 'camera_resolution') {
    applyCameraResolution(); // the page's own choice, not a session setting
    return;
  }
  if (!SETTING_NAMES.includes(name)) return;
  const value = readSetting(name);
  dirtySettings[name] = value;
  if (name === 'latency_stamp' && !value) latency.clear();
  if (call?.sessionId) patchSettings(call.sessionId, { [name]: value });
}

// ---- wiring --------------------------------------------------------------------------------------

ui.start.addEventListener('click', () => startCall());
ui.stop.addEventListener('click', () => {
  clearError(); // the user ended the call: what went wrong in it is over too
  stopCall();
});
$('error-dismiss').addEventListener('click', clearError);
ui.settingsForm.addEventListener('change', onSettingChanged);
ui.sourceInput.addEventListener('change', () => chooseSource(ui.sourceInput.files[0]));
ui.sourceClear.addEventListener('click', clearSource);
$('reference-input').addEventListener('change', (event) => {
  const file = event.target.files[0];
  if (file) uploadReference(file);
});
ui.sourceDrop.addEventListener('dragover', (event) => {
  event.preventDefault();
  ui.sourceDrop.classList.add('dragging');
});
ui.sourceDrop.addEventListener('dragleave', () => ui.sourceDrop.classList.remove('dragging'));
ui.sourceDrop.addEventListener('drop', (event) => {
  event.preventDefault();
  ui.sourceDrop.classList.remove('dragging');
  chooseSource(event.dataTransfer.files[0]);
});
window.addEventListener('pagehide', () => {
  // the server would notice the dead peer eventually; tell it now so the session slot frees at once
  if (call?.sessionId) apiFetch(`/api/sessions/${call.sessionId}`, { method: 'DELETE', keepalive: true }).catch(() => {});
});
setCallState('idle');
showCapabilities(true, false); // without a token yet this waits for Start
