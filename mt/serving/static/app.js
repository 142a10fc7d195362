// The mt page: translate with POST /translate, then draw POST /attention's maps as SVG heatmaps and
// the sentence's word alignment as lines between its words.
// Plain JS, no build step, no network beyond this server. Masks follow the model's convention:
// true = may attend; a cell whose mask is false is drawn hatched (grey: padding, orange: the future).
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const state = { lines: [], options: {}, attention: null };

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(`${response.status}: ${data.error}`);
  return data;
}

function showError(message) {
  $("error").textContent = message || "";
  $("error").hidden = !message;
}

function readOptions() {
  // split sentences: one joined translation a line, so no n-best list, alignment or attention map;
  // an empty field is left out, so the server decodes it as the run does
  const split = $("split-sentences").checked;
  const number = (id, parse) => { const value = parse($(id).value); return Number.isNaN(value) ? undefined : value; };
  return {
    beam: number("beam", (v) => parseInt(v, 10)), n_best: split ? 1 : number("n-best", (v) => parseInt(v, 10)),
    length_penalty: number("length-penalty", parseFloat), split_sentences: split,
  };
}

function showDecoding(decode) {
  // the controls start where `mt translate`, the API and a request without options start: the run's decoding
  $("beam").value = decode.beam;
  $("n-best").value = decode.n_best;
  $("length-penalty").value = decode.length_penalty;
  const how = decode.sample ? `sampling ${decode.sample}` : `beam ${decode.beam}, length penalty ${decode.length_penalty}`;
  $("decoding-note").textContent = `Starting from the run's own decoding (GET /info): ${how}` +
    (decode.tuned ? ", as mt tune chose it on val." : ".");
}

async function translate() {
  showError("");
  state.lines = $("source").value.split("\n");
  while (state.lines.length > 1 && state.lines[state.lines.length - 1].trim() === "") state.lines.pop();
  state.options = readOptions();
  $("translate").disabled = true;
  try {
    const split = state.options.split_sentences;
    const data = await post("translate", { lines: state.lines, alignments: !split, ...state.options });
    showResults(data.translations);
    $("explorer").hidden = true;
    if (split) return;
    fillSelect($("sentence"), state.lines.map((line, i) => [i, `${i + 1}: ${line.slice(0, 60)}`]));
    await loadAttention();
  } catch (e) {
    showError(e.message);
  } finally {
    $("translate").disabled = false;
  }
}

function showResults(translations) {
  const list = $("results");
  list.replaceChildren();
  translations.forEach((result, i) => {
    const item = document.createElement("li");
    const source = element("div", "source", state.lines[i]);
    const best = element("div", "translation", result.translation);
    const table = element("table", "nbest");
    result.nbest.forEach((hyp, rank) => {
      const row = table.insertRow();
      row.insertCell().textContent = `${rank + 1}.`;
      row.insertCell().textContent = hyp.translation;
      const score = row.insertCell();
      score.className = "score";
      score.textContent = hyp.score.toFixed(4);
    });
    const aligned = element("div", "alignment", `alignment: ${result.alignment || "none"}`);
    item.append(source, best, table, aligned);
    list.append(item);
  });
  $("output").hidden = false;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  node.className = className;
  node.textContent = text;
  return node;
}

function fillSelect(select, pairs) {
  const previous = select.value;
  select.replaceChildren(...pairs.map(([value, label]) => new Option(label, value)));
  if (pairs.some(([value]) => String(value) === previous)) select.value = previous;
}

async function loadAttention() {
  const index = parseInt($("sentence").value || "0", 10);
  state.attention = await post("attention", { lines: state.lines, index, ...state.options });
  const a = state.attention;
  const layers = Math.max(a.encoder.length, a.decoder.length);
  fillSelect($("layer"), [...Array(layers).keys()].map((l) => [l, `${l + 1} of ${layers}`]));
  fillSelect($("head"), [["mean", "mean of heads"], ...[...Array(a.heads).keys()].map((h) => [h, `${h + 1}`])]);
  const pads = a.source_mask.filter((m) => !m).length;
  $("batch-note").textContent = `Sentence ${index + 1} in a batch of ${state.lines.length}: padded to ` +
    `${a.source.length} source and ${a.target.length} target positions (${pads} source pad). ` +
    `Rows are queries; dimmed rows are padding, whose outputs the model ignores.`;
  $("explorer").hidden = false;
  draw();
}

function pick(maps) {
  // maps: [layer][head][query][key] -> the chosen layer's [query][key], one head or the mean
  const layer = maps[Math.min(parseInt($("layer").value, 10), maps.length - 1)];
  const head = $("head").value;
  if (head !== "mean") return layer[parseInt(head, 10)];
  return layer[0].map((row, q) => row.map((_, k) => layer.reduce((sum, h) => sum + h[q][k], 0) / layer.length));
}

function draw() {
  const a = state.attention;
  heatmap($("heatmap-encoder"), pick(a.encoder), a.masks.encoder, a.source, a.source, a.source_mask, a.source_mask);
  heatmap($("heatmap-decoder"), pick(a.decoder), a.masks.decoder, a.target, a.target, a.target_mask, a.target_mask);
  heatmap($("heatmap-cross"), pick(a.cross), a.masks.cross, a.target, a.source, a.target_mask, a.source_mask);
  alignment($("alignment"), a.alignment);
}

function alignment(svg, found) {
  // source words on top, target words below, a line for each (source, target) pair
  const gap = 14, charWidth = 7.5, top = 20, bottom = 110;
  const place = (words) => {
    let x = 8;
    return words.map((word) => { const at = x + (word.length * charWidth) / 2; x += word.length * charWidth + gap; return at; });
  };
  const xs = { source: place(found.source), target: place(found.target) };
  const width = Math.max(...[...xs.source, ...xs.target, 0]) + 80;
  svg.replaceChildren();
  svg.setAttribute("width", width);
  svg.setAttribute("height", bottom + 12);
  found.pairs.forEach(([i, j]) => {
    svg.append(svgNode("line", { x1: xs.source[i], y1: top + 6, x2: xs.target[j], y2: bottom - 16, class: "link" }));
  });
  found.source.forEach((word, i) => svg.append(svgNode("text", { x: xs.source[i], y: top, "text-anchor": "middle" }, word)));
  found.target.forEach((word, j) => svg.append(svgNode("text", { x: xs.target[j], y: bottom, "text-anchor": "middle" }, word)));
}

function svgNode(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function color(p) {
  // white (0) to deep blue (1), through the sqrt so small weights still show
  const t = Math.sqrt(Math.max(0, Math.min(1, p)));
  const mix = (from, to) => Math.round(from + (to - from) * t);
  return `rgb(${mix(255, 8)},${mix(255, 48)},${mix(255, 107)})`;
}

function definePatterns() {
  // once per page: every heatmap's hatched cells refer to these by id
  const svg = svgNode("svg", { width: 0, height: 0, style: "position:absolute" });
  const defs = svgNode("defs", {});
  for (const [id, stroke] of [["hatch-pad", "#9aa4ad"], ["hatch-future", "#e9a23b"]]) {
    const pattern = svgNode("pattern", { id, width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                         patternTransform: "rotate(45)" });
    pattern.append(svgNode("rect", { width: 6, height: 6, fill: "#f3f4f6" }),
                   svgNode("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke, "stroke-width": 2.5 }));
    defs.append(pattern);
  }
  svg.append(defs);
  document.body.prepend(svg);
}

function heatmap(svg, weights, mask, rowLabels, colLabels, rowReal, colReal) {
  const cell = Math.max(10, Math.min(24, Math.floor(520 / Math.max(rowLabels.length, colLabels.length))));
  const left = 96, top = 84;
  svg.replaceChildren();
  svg.setAttribute("width", left + cell * colLabels.length + 4);
  svg.setAttribute("height", top + cell * rowLabels.length + 4);
  colLabels.forEach((label, k) => {
    const x = left + k * cell + cell / 2, y = top - 4;
    svg.append(svgNode("text", { x, y, transform: `rotate(-60 ${x} ${y})`, class: colReal[k] ? "col" : "col pad" },
                       label));
  });
  rowLabels.forEach((label, q) => {
    svg.append(svgNode("text", { x: left - 4, y: top + q * cell + cell * 0.7, "text-anchor": "end",
                                 class: rowReal[q] ? "row" : "row pad" }, label));
    weights[q].forEach((p, k) => {
      const masked = !mask[q][k];
      const kind = !colReal[k] ? "pad" : "future";
      const rect = svgNode("rect", {
        x: left + k * cell, y: top + q * cell, width: cell - 1, height: cell - 1,
        fill: masked ? `url(#hatch-${kind})` : color(p), class: masked ? `cell masked ${kind}` : "cell",
        opacity: rowReal[q] ? 1 : 0.45, "data-p": p,
      });
      const why = masked ? `masked (${kind === "pad" ? "padding" : "future position"}): 0` : p.toFixed(4);
      rect.append(svgNode("title", {}, `${label} → ${colLabels[k]}: ${why}`));
      svg.append(rect);
    });
  });
}

function legend() {
  const box = (fill) => {
    const svg = svgNode("svg", { width: 16, height: 16 });
    svg.append(svgNode("rect", { width: 15, height: 15, fill }));
    return svg;
  };
  const scale = svgNode("svg", { width: 120, height: 16 });
  for (let i = 0; i < 12; i++) scale.append(svgNode("rect", { x: i * 10, width: 10, height: 15, fill: color(i / 11) }));
  const item = (...nodes) => { const span = document.createElement("span"); span.append(...nodes); return span; };
  $("legend").replaceChildren(item("0 ", scale, " 1 (probability)"),
                              item(box("url(#hatch-pad)"), " masked: padding"),
                              item(box("url(#hatch-future)"), " masked: future (causal)"));
}

async function showModel() {
  try {
    const info = await (await fetch("info")).json();
    const card = info.card || {};
    const scores = (card.headline || []).filter(([key]) => card[`best_val_${key}`] != null)
      .map(([key, label]) => `${label} ${card[`best_val_${key}`].toFixed(2)}`);
    const best = scores.length ? `, best validation ${scores.join(", ")}` : "";
    $("model-info").textContent = `${info.name}: ${info.model.encoder_layers}+${info.model.decoder_layers} layers, d ${info.model.d_model}, ` +
      `${info.model.heads} heads · ${info.checkpoint} · ${card.steps ?? "?"} steps${best}`;
    $("beam").max = info.limits.max_beam;
    showDecoding(info.decode);
    const { source, target } = info.languages;
    $("source-label").textContent = `${source} → ${target}, one sentence a line (or several: split sentences)`;
    if (source !== "de") $("source").value = "";  // the examples are German
  } catch (e) {
    showError(`GET /info failed: ${e.message}`);
  }
}

$("translate").addEventListener("click", translate);
$("source").addEventListener("keydown", (e) => { if (e.key === "Enter" && e.ctrlKey) translate(); });
$("sentence").addEventListener("change", () => loadAttention().catch((e) => showError(e.message)));
$("layer").addEventListener("change", draw);
$("head").addEventListener("change", draw);
definePatterns();
legend();
showModel();
