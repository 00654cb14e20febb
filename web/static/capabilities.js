// What this daemon can run (GET /api/capabilities): the engine choices and optional features whose model
// files verify. The settings form offers only those; the rest stay visible but disabled, each with the
// daemon's reason (what is missing and how to get it) in its tooltip and in a line under the form.
import { apiFetch } from './api.js';

const LOADING_RETRY_MS = 1000;
const LOADING_RETRIES = 120; // the daemon answers 503 while its models load

// form control -> the capability it needs: engine options by value, checkboxes and options by feature
const FEATURE_OF_CHECKBOX = { enhancer: 'enhancer' };
const FEATURE_OF_OPTION = { face_selector: { reference: 'reference' } };

/**
 * The daemon's capabilities, waiting while it loads its models; null when it cannot say (older daemon,
 * token not known yet with askToken false).
 */
export async function loadCapabilities({ askToken = true } = {}) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await apiFetch('/api/capabilities', { askToken });
    } catch (error) {
      if (error.status !== 503 || attempt >= LOADING_RETRIES) {
        console.warn('livefuse: capabilities unknown:', error.message);
        return null;
      }
      await new Promise((resolve) => setTimeout(resolve, LOADING_RETRY_MS));
    }
  }
}

function mark(control, entry, label) {
  const unavailable = entry && entry.available === false;
  control.disabled = Boolean(unavailable);
  control.title = unavailable ? `${label} is not available: ${entry.reason}` : '';
  control.dataset.unavailable = unavailable ? 'true' : 'false';
  return unavailable ? `${label}: ${entry.reason}` : null;
}

/**
 * Disable what the daemon cannot run and say why. A control already set to something unavailable is put
 * back to what works (the engine to auto, a checkbox off), so the form never shows a choice that is not in
 * effect. Returns the reasons shown.
 */
export function applyCapabilities(form, capabilities, hint) {
  if (!capabilities) return [];
  const reasons = [];
  const engine = form.elements.engine;
  for (const option of engine.options) {
    const reason = mark(option, capabilities.engines?.[option.value], `engine ${option.value}`);
    if (reason) reasons.push(reason);
    if (option.value === 'auto' && capabilities.default_engine) {
      option.textContent = `auto (${capabilities.default_engine})`;
    }
  }
  if (engine.selectedOptions[0]?.disabled) engine.value = 'auto';
  for (const [name, feature] of Object.entries(FEATURE_OF_CHECKBOX)) {
    const box = form.elements[name];
    const reason = mark(box, capabilities.features?.[feature], feature);
    box.closest('label').title = box.title;
    if (reason) {
      reasons.push(reason);
      box.checked = false;
    }
  }
  for (const [name, options] of Object.entries(FEATURE_OF_OPTION)) {
    const select = form.elements[name];
    for (const option of select.options) {
      const feature = options[option.value];
      if (!feature) continue;
      const reason = mark(option, capabilities.features?.[feature], `${option.value} face selection`);
      if (reason) reasons.push(reason);
    }
    if (select.selectedOptions[0]?.disabled) select.value = select.options[0].value;
  }
  if (hint) {
    hint.textContent = reasons.length ? `Unavailable here: ${reasons.join('; ')}` : '';
    hint.hidden = reasons.length === 0;
  }
  return reasons;
}
