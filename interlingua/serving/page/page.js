// The page of `interlingua serve`: a client of the service's JSON endpoints, nothing more.
// Every translation, attention weight and similarity comes from the server; this script only asks
// and draws (heat maps as table cells coloured by weight). No libraries, no build step.
"use strict";

const NAMES = {
  ar: "Arabic", cs: "Czech", de: "German", en: "English", es: "Spanish", fi: "Finnish", fr: "French",
  it: "Italian", ja: "Japanese", nl: "Dutch", pl: "Polish", pt: "Portuguese", ro: "Romanian", ru: "Russian",
  sv: "Swedish", tr: "Turkish", zh: "Chinese",
};

const state = {
  model: null,            // GET /model
  directions: new Map(),  // "src>tgt" -> {route, pivot}
  lastSentence: null,     // {text, lang, translations: Map(tgt -> text)}
  rows: 0,                // similarity rows made so far (ids stay unique)
  key: "",                // the API key where sessionStorage is blocked
};

const $ = (id) => document.getElementById(id);

function languageName(code) {
  return NAMES[code] ? `${NAMES[code]} (${code})` : code;
}

function el(tag, props = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key in node) node[key] = value;
    else node.setAttribute(key, value);
  }
  for (const child of [].concat(children)) {
    if (child !== null && child !== undefined) node.append(child);
  }
  return node;
}

// --- talking to the service ----------------------------------------------------------------------

class ServiceError extends Error {
  constructor(message, field, status) {
    super(message);
    this.field = field;
    this.status = status;
  }
}

// With `interlingua serve --api-key`, every call sends the key; the page asks for it on the first 401
// and keeps it in this tab's sessionStorage only.
const KEY_STORE = "interlingua-api-key";

function storedKey() {
  try {
    return sessionStorage.getItem(KEY_STORE) || state.key;
  } catch (err) {
    return state.key;  // storage blocked: the key lives as long as the page
  }
}

function askForKey() {
  const form = $("key-form");
  if (!form.hidden) return;
  form.hidden = false;
  $("api-key").focus();
}

function useKey(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  state.key = key;
  try {
    sessionStorage.setItem(KEY_STORE, key);
  } catch (err) { /* kept in state.key */ }
  $("api-key").value = "";
  $("key-form").hidden = true;
  clearMessages("page-messages");
  if (!state.model) start();  // the model's languages could not be read without the key
}

async function call(path, body) {
  let response;
  const headers = body === undefined ? {} : { "Content-Type": "application/json" };
  const key = storedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  try {
    response = await fetch(path, body === undefined ? { headers } : {
      method: "POST", headers, body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ServiceError(`the service did not answer (${err.message}); is interlingua serve still running?`, null, 0);
  }
  let data = null;
  try {
    data = await response.json();
  } catch (err) {
    throw new ServiceError(`the service answered ${response.status} without JSON`, null, response.status);
  }
  if (response.status === 401) askForKey();
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ServiceError(error.message || `HTTP ${response.status}`, error.field || null, response.status);
  }
  return data;
}

// --- messages (aria-live regions) -------------------------------------------------------------

function clearMessages(region) {
  $(region).replaceChildren();
}

function showMessage(region, text, kind = "info") {
  const box = $(region);
  if ([...box.children].some((p) => p.dataset.text === text)) return;  // the same error from several requests
  const message = el("p", { class: `message ${kind}`, text });
  message.dataset.text = text;
  box.append(message);
}

function showError(region, err) {
  const where = [err.field, err.status ? `HTTP ${err.status}` : null].filter(Boolean).join(", ");
  showMessage(region, `Error: ${err.message}${where ? ` (${where})` : ""}`, "error");
}

function busy(button, on) {
  button.disabled = on;
  button.setAttribute("aria-busy", on ? "true" : "false");
}

// --- start: what the model is -----------------------------------------------------------------

async function start() {
  try {
    const [model, directions] = await Promise.all([call("model"), call("directions")]);
    state.model = model;
    for (const d of directions.directions) state.directions.set(`${d.src}>${d.tgt}`, d);
  } catch (err) {
    $("model-info").textContent = "The model's languages could not be read.";
    showError("page-messages", err);
    return;
  }
  const m = state.model;
  const bridge = m.bridge === "attention" ? `attention bridge, ${m.heads} heads` : `bridge: ${m.bridge}`;
  $("model-info").textContent = `Model ${m.model}: reads ${m.languages.join(", ")}, writes ${m.targets.join(", ")}; `
    + `${m.encoder} encoder, ${bridge}.`;
  const source = $("source-lang");
  for (const lang of m.languages) source.append(el("option", { value: lang, text: languageName(lang) }));
  if (m.languages.includes("en")) source.value = "en";
  setUpLayers();
  addSimilarityRow(m.languages.includes("en") ? "en" : m.languages[0], "a dog is running in the snow .");
  addSimilarityRow(m.languages.find((l) => l !== "en") || m.languages[0], "");
  addSimilarityRow(m.languages[Math.min(2, m.languages.length - 1)], "");
  updateCount();
}

function setUpLayers() {
  const layers = state.model.self_attention_layers;
  const select = $("layer");
  for (let layer = 1; layer <= layers; layer++) {
    select.append(el("option", { value: String(layer), text: `layer ${layer}${layer === layers ? " (last)" : ""}` }));
  }
  if (layers) select.value = String(layers);
  $("layer-controls").hidden = !layers;
  if (!state.model.bridge_attention && layers) {  // no bridge to look inside: the encoder's attention it is
    $("bridge-title").textContent = "Inside the encoder";
    document.querySelector('nav a[href="#bridge"]').textContent = "Inside the encoder";
  }
  const parts = [];
  if (state.model.bridge_attention) parts.push("each bridge head's attention over the subwords (a row sums to 1)");
  if (layers) parts.push("the self-attention of one encoder layer, per head (row: a subword, what it attends to)");
  $("bridge-hint").textContent = parts.length
    ? `For the sentence above: ${parts.join("; and ")}. Darker is more weight.`
    : "This model has no attention to show (no attention bridge, and an encoder without self-attention).";
}

// --- 1. translate --------------------------------------------------------------------------------

function updateCount() {
  const max = state.model ? state.model.max_chars : null;
  const n = $("source-text").value.length;
  $("source-count").textContent = max ? `${n} / ${max} characters.` : `${n} characters.`;
  $("source-count").classList.toggle("over", max !== null && n > max);
}

function badge(route) {
  return el("span", { class: `badge ${route}`, text: route });
}

async function translateAll(event) {
  event.preventDefault();
  if (!state.model) return;
  const text = $("source-text").value;
  const src = $("source-lang").value;
  const beam = Number($("beam").value);
  const showPivot = $("show-pivot").checked;
  clearMessages("translate-messages");
  const targets = state.model.targets.filter((t) => t !== src);
  const body = $("translations").tBodies[0];
  body.replaceChildren();
  $("translations").hidden = false;
  $("translations").classList.toggle("no-pivot", !showPivot);
  $("translations-caption").textContent =
    `From ${languageName(src)}, ${beam === 1 ? "greedy search" : `beam search (beam ${beam})`}`;
  const sentence = { text, lang: src, translations: new Map() };
  state.lastSentence = sentence;
  const cells = new Map();
  for (const tgt of targets) {
    const info = state.directions.get(`${src}>${tgt}`) || { route: "zero-shot", pivot: null };
    const output = el("td", { class: "output pending", text: "translating…" });
    output.lang = tgt;
    const pivotCell = el("td", { class: "pivot-col" });
    body.append(el("tr", { "data-tgt": tgt }, [
      el("th", { scope: "row", text: languageName(tgt) }), el("td", {}, badge(info.route)), output, pivotCell]));
    cells.set(tgt, { info, output, pivotCell });
  }
  const button = $("translate-button");
  busy(button, true);
  // One request for every target (the sentence is encoded once), and one per pivot language for the
  // zero-shot targets translated through it.
  const jobs = targets.length ? [translateDirect(text, src, targets, beam, cells, sentence)] : [];
  const throughPivot = new Map();  // pivot -> the zero-shot targets that go through it
  for (const [tgt, { info, pivotCell }] of cells) {
    if (info.route !== "zero-shot") {
      pivotCell.textContent = "";
    } else if (!info.pivot) {
      pivotCell.append(el("span", { class: "muted", text: "no language has both legs trained" }));
    } else if (showPivot) {
      pivotCell.append(el("span", { class: "pending", text: "translating…" }));
      if (!throughPivot.has(info.pivot)) throughPivot.set(info.pivot, []);
      throughPivot.get(info.pivot).push(tgt);
    }
  }
  for (const [pivot, tgts] of throughPivot) jobs.push(translateThrough(text, src, pivot, tgts, beam, cells));
  jobs.push(showAttention(text, src));
  await Promise.allSettled(jobs);
  busy(button, false);
  const failed = body.querySelectorAll(".failed").length;
  if (!failed) showMessage("translate-messages", `Translated into ${targets.length} languages.`);
}

// POST /translate with `tgts`: the answer has one result per target, in the order asked.
function translateDirect(text, src, targets, beam, cells, sentence) {
  return call("translate", { texts: [text], src, tgts: targets, beam }).then((answer) => {
    for (const result of answer.results) {
      const { output } = cells.get(result.tgt);
      const translation = result.translations[0];
      sentence.translations.set(result.tgt, translation);
      output.textContent = translation || "(empty)";
      output.classList.remove("pending");
    }
  }, (err) => {
    for (const tgt of targets) {
      const { output } = cells.get(tgt);
      output.textContent = "no translation";
      output.classList.replace("pending", "failed");
    }
    showError("translate-messages", err);
  });
}

function translateThrough(text, src, pivot, targets, beam, cells) {
  return call("translate", { texts: [text], src, tgts: targets, beam, pivot }).then((answer) => {
    for (const result of answer.results) {
      const path = el("span", { class: "path" }, [badge("pivot"), ` ${src} → ${pivot} → ${result.tgt}`]);
      const final = el("span", { class: "output", text: result.translations[0] || "(empty)" });
      final.lang = result.tgt;
      cells.get(result.tgt).pivotCell.replaceChildren(path, final);
    }
  }, (err) => {
    for (const tgt of targets) cells.get(tgt).pivotCell.replaceChildren(el("span", { class: "failed", text: "no translation" }));
    showError("translate-messages", err);
  });
}

// --- 2. inside the bridge -------------------------------------------------------------------------

// Weight -> colour: white to deep blue, scaled to the map's largest weight so that patterns show;
// the legend says what the darkest cell means.
function heat(value, max) {
  const t = max > 0 ? Math.max(0, Math.min(1, value / max)) : 0;
  return { background: `hsl(221, 83%, ${Math.round(98 - 60 * t)}%)`, dark: t > 0.55 };
}

function shownToken(token) {
  return token.replace(/\u2581/g, "·");  // sentencepiece's word-start mark, made visible but quiet
}

function shownWeight(value) {
  // Two decimals without the leading zero; below .005 the cell stays blank (the title has the number).
  return value < 0.005 ? "" : value.toFixed(2).replace(/^0/, "");
}

function legend(max, what) {
  return el("div", { class: "legend" }, [
    el("span", { text: "0" }), el("span", { class: "ramp", "aria-hidden": "true" }),
    el("span", { text: `${max.toFixed(2)} (${what})` })]);
}

function largest(matrices) {
  return Math.max(0, ...matrices.map((m) => Math.max(...m.flat())));
}

function heatmapTable(matrix, rowLabels, columnTokens, caption, className, max = largest([matrix])) {
  const head = el("tr", {}, [el("td", { class: "corner" })].concat(
    columnTokens.map((tok) => el("th", { scope: "col", class: "token", text: shownToken(tok), title: tok }))));
  const rows = matrix.map((row, i) => el("tr", {}, [el("th", { scope: "row", text: rowLabels[i] })].concat(
    row.map((value, j) => {
      const colour = heat(value, max);
      const cell = el("td", { class: colour.dark ? "cell dark" : "cell", title: `${rowLabels[i]} → ${columnTokens[j]}: ${value.toFixed(3)}` },
        el("span", { class: "value", text: shownWeight(value) }));
      cell.style.backgroundColor = colour.background;
      return cell;
    }))));
  const table = el("table", { class: `heatmap ${className}` }, [
    el("caption", { text: caption }), el("thead", {}, head), el("tbody", {}, rows)]);
  return table;
}

async function showAttention(text, lang) {
  clearMessages("bridge-messages");
  const box = $("heatmaps");
  const m = state.model;
  if (!m.bridge_attention && !m.self_attention_layers) {
    box.replaceChildren();
    return;
  }
  const body = { text, lang };
  if (m.self_attention_layers) body.layer = Number($("layer").value);
  box.classList.add("stale");
  let answer;
  try {
    answer = await call("attention", body);
  } catch (err) {
    box.replaceChildren();
    showError("bridge-messages", err);
    return;
  } finally {
    box.classList.remove("stale");
  }
  const parts = [];
  if (answer.bridge) {
    const heads = answer.bridge.map((_, i) => `head ${i + 1}`);
    const max = largest([answer.bridge]);
    const table = heatmapTable(answer.bridge, heads, answer.tokens,
      `Bridge attention: ${answer.bridge.length} heads over ${answer.tokens.length} subwords`, "bridge-map", max);
    table.id = "bridge-heatmap";
    parts.push(el("div", { class: "map-block" }, [el("div", { class: "scroll" }, table), legend(max, "largest weight")]));
  }
  if (answer.self_attention) {
    const grid = el("div", { class: "head-grid", id: "self-attention-maps" });
    const max = largest(answer.self_attention);  // one scale for the layer: heads compare
    const labels = answer.tokens.map(shownToken);
    answer.self_attention.forEach((matrix, h) => {
      grid.append(el("div", { class: "scroll" },
        heatmapTable(matrix, labels, answer.tokens, `Layer ${answer.layer}, head ${h + 1}`, "self-map", max)));
    });
    parts.push(el("div", { class: "map-block" }, [
      el("h3", { text: `Encoder self-attention, layer ${answer.layer} of ${answer.layers}` }),
      el("p", { class: "small", text: "Row: a subword; columns: what it attends to (a row sums to 1)." }),
      grid, legend(max, "the layer's largest weight")]));
  }
  box.replaceChildren(...parts);
  showMessage("bridge-messages", `Attention of ${answer.tokens.length} subwords shown.`);
}

// --- 3. across languages --------------------------------------------------------------------------

function addSimilarityRow(lang, text) {
  const n = ++state.rows;
  const list = $("similarity-rows");
  const select = el("select", { id: `sim-lang-${n}`, class: "sim-lang" });
  for (const code of state.model.languages) select.append(el("option", { value: code, text: languageName(code) }));
  select.value = lang;
  const input = el("input", { id: `sim-text-${n}`, class: "sim-text", type: "text", value: text, spellcheck: false });
  const textLabel = el("label", { for: input.id, class: "sim-label" });
  const langLabel = el("label", { for: select.id, class: "visually-hidden" });
  const remove = el("button", { type: "button", class: "remove", text: "Remove" });
  const item = el("li", { class: "sim-row" }, [textLabel, input, langLabel, select, remove]);
  remove.addEventListener("click", () => {
    const next = item.nextElementSibling || item.previousElementSibling;
    item.remove();
    renumberRows();
    if (next) next.querySelector("input").focus();
  });
  list.append(item);
  renumberRows();
  return input;
}

function renumberRows() {
  [...$("similarity-rows").children].forEach((item, i) => {
    const [textLabel, , langLabel, , remove] = item.children;
    textLabel.textContent = `Sentence ${i + 1}`;
    langLabel.textContent = `Language of sentence ${i + 1}`;
    remove.setAttribute("aria-label", `Remove sentence ${i + 1}`);
  });
}

function similarityRows() {
  return [...$("similarity-rows").children].map((item) => ({
    text: item.querySelector(".sim-text").value, lang: item.querySelector(".sim-lang").value,
  }));
}

function useTranslations() {
  const last = state.lastSentence;
  if (!last || !last.translations.size) {
    showMessage("similarity-messages", "Translate a sentence first (in Translate, above).", "error");
    return;
  }
  clearMessages("similarity-messages");
  $("similarity-rows").replaceChildren();
  addSimilarityRow(last.lang, last.text);
  for (const [lang, text] of last.translations) {
    if (state.model.languages.includes(lang)) addSimilarityRow(lang, text);
  }
  showMessage("similarity-messages", `Filled in the sentence and ${last.translations.size} translations.`);
}

function similarityColour(value) {
  // Diverging: orange below zero, blue above, white at zero.
  const t = Math.max(-1, Math.min(1, value));
  const light = Math.round(98 - 58 * Math.abs(t));
  return { background: t >= 0 ? `hsl(221, 83%, ${light}%)` : `hsl(25, 90%, ${light}%)`, dark: Math.abs(t) > 0.55 };
}

async function compare(event) {
  event.preventDefault();
  if (!state.model) return;
  clearMessages("similarity-messages");
  const rows = similarityRows();
  const button = $("compare-button");
  busy(button, true);
  let answer;
  try {
    answer = await call("similarity", { texts: rows.map((r) => r.text), langs: rows.map((r) => r.lang) });
  } catch (err) {
    showError("similarity-messages", err);
    const match = err.field && err.field.match(/^body\.(texts|langs)\.(\d+)$/);
    if (match) {  // put the cursor where the problem is
      const item = $("similarity-rows").children[Number(match[2])];
      if (item) item.querySelector(match[1] === "texts" ? ".sim-text" : ".sim-lang").focus();
    }
    return;
  } finally {
    busy(button, false);
  }
  const names = rows.map((r, i) => `${i + 1} · ${r.lang}`);
  const head = el("tr", {}, [el("td", { class: "corner" })].concat(
    names.map((name, j) => el("th", { scope: "col", text: name, title: rows[j].text }))));
  const body = answer.similarity.map((row, i) => el("tr", {}, [
    el("th", { scope: "row", class: "sentence" }, [
      el("span", { class: "num", text: names[i] }), el("span", { class: "text", text: rows[i].text, lang: rows[i].lang })]),
  ].concat(row.map((value, j) => {
    const colour = similarityColour(value);
    const cell = el("td", { class: colour.dark ? "cell dark" : "cell", text: value.toFixed(2),
      title: `${names[i]} vs ${names[j]}: ${value.toFixed(4)}` });
    cell.style.backgroundColor = colour.background;
    return cell;
  }))));
  const table = el("table", { class: "heatmap similarity", id: "similarity-table" }, [
    el("caption", { text: `Cosine similarity of ${rows.length} sentence vectors` }),
    el("thead", {}, head), el("tbody", {}, body)]);
  $("similarity-result").replaceChildren(el("div", { class: "scroll" }, table));
  showMessage("similarity-messages", `Compared ${rows.length} sentences.`);
}

// --- wiring ---------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("translate-form").addEventListener("submit", translateAll);
  $("source-text").addEventListener("input", updateCount);
  $("source-text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      $("translate-form").requestSubmit();
    }
  });
  $("show-pivot").addEventListener("change", () => {
    if (!$("translations").hidden) $("translate-form").requestSubmit();  // asks for the pivot translations
  });
  $("layer").addEventListener("change", () => {
    const last = state.lastSentence;
    if (last) showAttention(last.text, last.lang);
  });
  $("similarity-form").addEventListener("submit", compare);
  $("add-row").addEventListener("click", () => {
    const langs = state.model ? state.model.languages : [];
    addSimilarityRow(langs[state.rows % Math.max(1, langs.length)], "").focus();
  });
  $("use-translations").addEventListener("click", useTranslations);
  $("key-form").addEventListener("submit", useKey);
  start();
});
