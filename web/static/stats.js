// Numbers for the stats table: rates and delays from two getStats() snapshots taken a second apart,
// and formatting of the server's counters. Pure functions; app.js owns the timer and the DOM.

/** `value` with `digits` decimals and a unit, or an en dash when there is no value yet. */
export function formatNumber(value, digits = 0, unit = '') {
  return value === null || value === undefined || Number.isNaN(value) ? '–' : `${value.toFixed(digits)}${unit}`;
}

/** The video inbound-rtp and outbound-rtp reports of an RTCStatsReport (null when absent). */
export function videoRtpReports(statsReport) {
  let inbound = null;
  let outbound = null;
  statsReport.forEach((report) => {
    if (report.kind !== 'video' && report.mediaType !== 'video') return;
    if (report.type === 'inbound-rtp') inbound = report;
    if (report.type === 'outbound-rtp') outbound = report;
  });
  return { inbound, outbound };
}

function perSecond(now, before, key) {
  if (!now || !before || now[key] === undefined || before[key] === undefined) return null;
  const seconds = (now.timestamp - before.timestamp) / 1000;
  return seconds > 0 ? (now[key] - before[key]) / seconds : null;
}

/**
 * Rates between two snapshots of videoRtpReports(); `previous` may be empty (first second).
 * fps: the browser's own framesPerSecond where it has one, else the counters' rate. Jitter buffer
 * delay: mean per frame emitted in the interval (delta jitterBufferDelay / delta jitterBufferEmittedCount).
 */
export function summariseRtp(current, previous = {}) {
  const { inbound, outbound } = current;
  const bytesIn = perSecond(inbound, previous.inbound, 'bytesReceived');
  const bytesOut = perSecond(outbound, previous.outbound, 'bytesSent');
  let jitterMs = null;
  const emitted = (inbound?.jitterBufferEmittedCount ?? 0) - (previous.inbound?.jitterBufferEmittedCount ?? 0);
  if (inbound && previous.inbound && emitted > 0) {
    jitterMs = (1000 * (inbound.jitterBufferDelay - previous.inbound.jitterBufferDelay)) / emitted;
  }
  return {
    fpsSent: outbound?.framesPerSecond ?? perSecond(outbound, previous.outbound, 'framesEncoded'),
    fpsReceived: inbound?.framesPerSecond ?? perSecond(inbound, previous.inbound, 'framesDecoded'),
    framesDecoded: inbound?.framesDecoded ?? 0,
    kbitsIn: bytesIn === null ? null : (bytesIn * 8) / 1000,
    kbitsOut: bytesOut === null ? null : (bytesOut * 8) / 1000,
    jitterMs,
  };
}

/** The server's processing_ms: a number, or an object such as {last, p50}. */
export function formatProcessing(value) {
  if (typeof value === 'number') return formatNumber(value, 1, ' ms');
  if (value && typeof value === 'object') {
    const parts = Object.entries(value).map(([key, ms]) => `${key} ${formatNumber(ms, 1)}`);
    return `${parts.join(', ')} ms`;
  }
  return '–';
}

/**
 * The server's swap cadence ({swap_share: "2/5", frames_shed, worker_busy}) in plain words: "every frame",
 * or, when the daemon swaps fewer frames because its worker cannot keep up, "2 of 5 frames swapped,
 * 166 skipped (worker 95% busy)". Skipped frames are not sent at all (never an unswapped face).
 */
export function formatCadence(quality) {
  if (!quality || !quality.swap_share) return '–';
  const [swapped, of] = quality.swap_share.split('/');
  if (swapped === of) return 'every frame';
  const busy = typeof quality.worker_busy === 'number' ? ` (worker ${Math.round(quality.worker_busy * 100)}% busy)` : '';
  return `${swapped} of ${of} frames swapped, ${quality.frames_shed ?? 0} skipped${busy}`;
}

/**
 * What the daemon's encoder sends ({bitrate_kbps, from_receiver_estimate, size}): "412 kbit/s
 * (estimate), 480x360"; "(start)" before the browser's bandwidth estimate reached it.
 */
export function formatSending(sending) {
  if (!sending || typeof sending.bitrate_kbps !== 'number') return '–';
  const origin = sending.from_receiver_estimate ? 'estimate' : 'start';
  const size = sending.size ? `, ${sending.size}` : '';
  return `${formatNumber(sending.bitrate_kbps)} kbit/s (${origin})${size}`;
}
