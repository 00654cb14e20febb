// Frame stamps: a 32-bit millisecond clock written into the top-left of each sent frame and read back
// from the received one, so the page can measure glass-to-glass latency without any server help.
// Mirrors streamer/outputs/frame_stamp.py exactly: 32 blocks of 16x16 px in one row at y 0..15, x = 16*i,
// MSB first, white (255) = 1, black (0) = 0; a block is read by averaging its centre 8x8 (grey = mean
// of R, G, B), threshold 128; a reading is rejected when any block average lies between 64 and 192.

export const STAMP_BITS = 32;
export const STAMP_BLOCK = 16;
export const STAMP_WIDTH = STAMP_BITS * STAMP_BLOCK;
const CENTRE_FROM = 4;
const CENTRE_TO = 12; // exclusive: pixels 4..11 are the centre 8x8 of a 16 px block
const ONE_THRESHOLD = 128;
const AMBIGUOUS_LOW = 64;
const AMBIGUOUS_HIGH = 192;

/** The stamp clock: performance.now() in whole ms, wrapped to uint32. */
export function stampNow() {
  return Math.floor(performance.now()) >>> 0;
}

/** Milliseconds from `stamp` to the current stamp clock, robust to the uint32 wrap. */
export function stampAge(stamp) {
  return (stampNow() - stamp) >>> 0;
}

/** Paint `value` (uint32) as the block row at the top-left of a 2D context. */
export function writeStamp(context, value) {
  for (let bit = 0; bit < STAMP_BITS; bit++) {
    const isOne = (value >>> (STAMP_BITS - 1 - bit)) & 1;
    context.fillStyle = isOne ? '#ffffff' : '#000000';
    context.fillRect(bit * STAMP_BLOCK, 0, STAMP_BLOCK, STAMP_BLOCK);
  }
}

/**
 * Decode a stamp from RGBA pixels of the stamp strip (STAMP_WIDTH x STAMP_BLOCK, row-major).
 * Returns the uint32 value, or null when a block is too grey to trust (no stamp, or codec damage).
 */
export function readStamp(rgba, width = STAMP_WIDTH) {
  let value = 0;
  for (let bit = 0; bit < STAMP_BITS; bit++) {
    let sum = 0;
    for (let y = CENTRE_FROM; y < CENTRE_TO; y++) {
      for (let x = bit * STAMP_BLOCK + CENTRE_FROM; x < bit * STAMP_BLOCK + CENTRE_TO; x++) {
        const offset = (y * width + x) * 4;
        sum += (rgba[offset] + rgba[offset + 1] + rgba[offset + 2]) / 3;
      }
    }
    const mean = sum / ((CENTRE_TO - CENTRE_FROM) * (CENTRE_TO - CENTRE_FROM));
    if (mean > AMBIGUOUS_LOW && mean < AMBIGUOUS_HIGH) {
      return null;
    }
    value = ((value << 1) | (mean >= ONE_THRESHOLD ? 1 : 0)) >>> 0;
  }
  return value;
}

/**
 * Reads stamps from a playing <video>. The strip is scaled from the sent frame size to the received
 * one, so a server that downscales still yields readings.
 */
export class StampReader {
  constructor(canvas) {
    this.canvas = canvas;
    this.canvas.width = STAMP_WIDTH;
    this.canvas.height = STAMP_BLOCK;
    this.context = canvas.getContext('2d', { willReadFrequently: true });
  }

  read(video, sentWidth, sentHeight) {
    if (!video.videoWidth || !video.videoHeight || !sentWidth || !sentHeight) {
      return null;
    }
    const sourceWidth = (video.videoWidth * STAMP_WIDTH) / sentWidth;
    const sourceHeight = (video.videoHeight * STAMP_BLOCK) / sentHeight;
    this.context.drawImage(video, 0, 0, sourceWidth, sourceHeight, 0, 0, STAMP_WIDTH, STAMP_BLOCK);
    const pixels = this.context.getImageData(0, 0, STAMP_WIDTH, STAMP_BLOCK).data;
    return readStamp(pixels);
  }
}

/** A sliding window of latency samples with percentiles. */
export class LatencyWindow {
  constructor(size = 90) {
    this.size = size;
    this.samples = [];
  }

  add(milliseconds) {
    this.samples.push(milliseconds);
    if (this.samples.length > this.size) {
      this.samples.shift();
    }
  }

  clear() {
    this.samples = [];
  }

  percentile(fraction) {
    if (this.samples.length === 0) {
      return null;
    }
    const sorted = [...this.samples].sort((a, b) => a - b);
    const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil(fraction * sorted.length) - 1));
    return sorted[index];
  }
}

// ---- frame loops ---------------------------------------------------------------------------------

const MAX_PLAUSIBLE_LATENCY_MS = 10000; // older readings are a misread or a frozen stream

/**
 * Calls `onFrame` once per new video frame (requestVideoFrameCallback), else once per display frame
 * (requestAnimationFrame). Returns a function that stops the loop.
 */
export function everyVideoFrame(video, onFrame) {
  let stopped = false;
  const hasFrameCallback = 'requestVideoFrameCallback' in HTMLVideoElement.prototype;
  const schedule = () => {
    if (stopped) return;
    if (hasFrameCallback) {
      video.requestVideoFrameCallback(tick);
    } else {
      requestAnimationFrame(tick);
    }
  };
  const tick = () => {
    if (stopped) return;
    onFrame();
    schedule();
  };
  schedule();
  return () => {
    stopped = true;
  };
}

/**
 * Draws each camera frame into `canvas` (sized to the camera, resized when the camera's size changes) and,
 * while `stamping()` is true, stamps it with the stamp clock (opt-in: the page's "measure latency").
 */
export function startStamping(video, canvas, stamping = () => true) {
  const context = canvas.getContext('2d');
  const fit = () => {
    if (canvas.width !== video.videoWidth || canvas.height !== video.videoHeight) {
      canvas.width = video.videoWidth;
      canvas.height = video.videoHeight;
    }
  };
  fit();
  return everyVideoFrame(video, () => {
    fit();
    context.drawImage(video, 0, 0, canvas.width, canvas.height);
    if (stamping()) writeStamp(context, stampNow());
  });
}

/**
 * Reads the stamp of each received frame into `latencyWindow` while `reading()` is true: one sample per
 * distinct stamp. `sentCanvas` is the canvas being sent (its size is the sent frame size).
 */
export function startLatencyReadout(video, reader, latencyWindow, sentCanvas, reading = () => true) {
  let lastStamp = null;
  return everyVideoFrame(video, () => {
    if (!reading()) return;
    const stamp = reader.read(video, sentCanvas.width, sentCanvas.height);
    if (stamp === null || stamp === lastStamp) return;
    lastStamp = stamp;
    const age = stampAge(stamp);
    if (age < MAX_PLAUSIBLE_LATENCY_MS) {
      latencyWindow.add(age);
    }
  });
}
