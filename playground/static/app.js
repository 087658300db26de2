// kochar-gpt playground: streams samples from POST /api/generate (Server-Sent Events over fetch, since
// EventSource cannot POST), shows each character's probability on hover and its attention on click.
"use strict";

const $ = (id) => document.getElementById(id);
const panes = { a: makePane("a"), b: makePane("b") };
let runs = [];
let aborter = null;

function makePane(key) {
  const root = $("pane-" + key);
  return { key, root, title: root.querySelector(".pane-title"), meta: root.querySelector(".meta"),
           text: root.querySelector(".text"), run: null, prompt: "", context: "", chars: [] };
}

function setStatus(message, isError = false) {
  $("status").textContent = message;
  $("status").classList.toggle("error", isError);
}

function percent(p) {
  return p >= 0.001 ? (100 * p).toFixed(1) + "%" : (100 * p).toPrecision(2) + "%";
}

function visible(text) {  // whitespace a reader can see in the tooltip and the attention grid
  return text === "\n" ? "↵" : text === " " ? "␣" : text === "\t" ? "⇥" : text === "" ? "∅" : text;
}

function runLabel(run) {
  const bpc = run.val_bpc == null ? "–" : run.val_bpc.toFixed(3);
  const step = run.step == null ? "?" : run.step;
  const updates = run.weights === "averaged" ? ` (${run.average_updates ?? "?"} updates)` : "";
  const file = run.chosen === "best" ? " · best.pt" : "";  // its best validation, not its last weights
  return run.error ? `${run.name} (읽을 수 없음 · unreadable)` :
    `${run.name} · ${step} steps · ${run.recipe} · ${bpc} bpc · ${run.weights} weights${updates}${file}`;
}

async function loadRuns() {
  const res = await fetch("/api/runs");
  runs = await res.json();
  for (const [select, pick] of [[$("run-a"), 0], [$("run-b"), 1]]) {
    select.replaceChildren(...runs.map((run) => new Option(runLabel(run), run.name, false, false)));
    const preferred = runs.findIndex((run) => run.default);
    const index = pick === 0 ? Math.max(preferred, 0) : runs.findIndex((run, i) => i !== preferred);
    if (index >= 0) select.selectedIndex = index;
  }
  setStatus(runs.length ? `실행 ${runs.length}개 · ${runs.length} run(s)` :
    "실행이 없습니다: 먼저 학습하세요 · no runs yet: train one first (python train.py)", !runs.length);
}

function numberOrNull(id) {
  const value = $(id).value.trim();
  return value === "" ? null : Number(value);
}

function request(run) {
  return { run, prompt: $("prompt").value, max_new_tokens: numberOrNull("max-new-tokens"),
           temperature: numberOrNull("temperature"), top_k: numberOrNull("top-k"), top_p: numberOrNull("top-p"),
           seed: numberOrNull("seed"), stream: true };
}

function parseEvent(block) {
  let type = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) type = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  return data.length ? { type, data: JSON.parse(data.join("\n")) } : null;
}

async function streamInto(pane, body, signal) {
  const res = await fetch("/api/generate", { method: "POST", headers: { "Content-Type": "application/json" },
                                             body: JSON.stringify(body), signal });
  if (!res.ok) {
    const err = await res.json().catch(() => ({ error: res.statusText }));
    throw new Error(err.error || res.statusText);
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (event) handleEvent(pane, event);
    }
  }
}

function handleEvent(pane, { type, data }) {
  if (type === "char") addChar(pane, data);
  else if (type === "done") finish(pane, data);
  else if (type === "error") throw new Error(data.error);
}

function resetPane(pane, run, prompt) {
  Object.assign(pane, { run, prompt, context: prompt === "" ? "\n" : prompt, chars: [] });
  pane.title.textContent = `${pane.key.toUpperCase()} · ${run}`;
  pane.meta.textContent = "생성 중… · sampling…";
  const shown = document.createElement("span");
  shown.className = "prompt";
  shown.textContent = prompt;
  pane.text.replaceChildren(shown);
}

function addChar(pane, event) {
  const span = document.createElement("span");
  span.className = "ch";
  span.textContent = event.text;
  span.style.setProperty("--p", event.prob.toFixed(3));
  span.dataset.index = pane.chars.length;
  pane.chars.push(event);
  pane.text.appendChild(span);
}

function finish(pane, summary) {
  pane.context = summary.context;
  const bits = pane.chars.reduce((sum, c) => sum - Math.log2(Math.max(c.prob, 1e-12)), 0);
  const mean = pane.chars.length ? (bits / pane.chars.length).toFixed(2) : "–";
  pane.meta.textContent = `새 글자 ${pane.chars.length}개 · ${summary.new_tokens} tokens · seed ${summary.seed}` +
    ` · 평균 놀람 ${mean} bits/char` + (summary.unknown_chars.length ? ` · <unk>: ${summary.unknown_chars.join(" ")}` : "");
}

async function generate(event) {
  event.preventDefault();
  if (aborter) aborter.abort();
  const mine = new AbortController();
  aborter = mine;
  const active = $("compare").checked && runs.length ? [panes.a, panes.b] : [panes.a];
  const selects = { a: $("run-a"), b: $("run-b") };
  active.forEach((pane) => resetPane(pane, selects[pane.key].value, $("prompt").value));
  $("attention").hidden = true;
  $("generate").disabled = true;
  $("stop").disabled = false;
  setStatus("생성 중… · sampling…");
  const jobs = active.map((pane) => streamInto(pane, request(pane.run), mine.signal));
  const results = await Promise.allSettled(jobs);
  if (aborter !== mine) return;  // a newer generation has the page now
  const failed = results.find((r) => r.status === "rejected" && r.reason.name !== "AbortError");
  const stopped = results.some((r) => r.status === "rejected" && r.reason.name === "AbortError");
  setStatus(failed ? "오류 · error: " + failed.reason.message : stopped ? "멈춤 · stopped" : "완료 · done",
            Boolean(failed));
  const unfinished = failed ? "" : "멈춤 · stopped";
  active.forEach((pane) => { if (pane.meta.textContent.startsWith("생성")) pane.meta.textContent = unfinished; });
  $("generate").disabled = false;
  $("stop").disabled = true;
}

function showTooltip(span, event) {
  const tip = $("tooltip");
  const head = document.createElement("div");
  head.className = "tip-head";
  head.innerHTML = '<span class="tip-char"></span><span class="tip-prob"></span>';
  head.firstChild.textContent = visible(event.text);
  head.lastChild.textContent = percent(event.prob);
  const table = document.createElement("table");
  table.className = "tip-top";
  const scale = Math.max(event.prob, ...event.top.map((alt) => alt.prob), 1e-9);
  for (const alt of event.top) {
    const row = table.insertRow();
    row.insertCell().textContent = visible(alt.text);
    row.insertCell().textContent = percent(alt.prob);
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = Math.round(90 * alt.prob / scale) + "px";
    row.insertCell().appendChild(bar);
  }
  const note = document.createElement("div");
  note.textContent = event.top.length ? "다른 후보 · it beat:" : "다른 후보 없음 · no other candidate";
  tip.replaceChildren(head, ...stagesLine(event), note, table);
  const box = span.getBoundingClientRect();
  tip.hidden = false;
  tip.style.left = Math.min(box.left, window.innerWidth - tip.offsetWidth - 8) + "px";
  tip.style.top = (box.bottom + 6 + tip.offsetHeight > window.innerHeight ? box.top - tip.offsetHeight - 6 : box.bottom + 6) + "px";
}

// A hangul run's syllable: p(initial) · p(medial | initial) · p(final | both), whose product is its
// probability ("ㄱ 62.0% · ㅏ 80.0% · ㄴ 41.0%"; no final shows as ∅). Other characters have no line.
function stagesLine(event) {
  if (!event.stages) return [];
  const line = document.createElement("div");
  line.className = "tip-stages";
  const [initial, medial, final] = event.stages;
  line.textContent = "초성·중성·종성 · jamo stages: " + [[initial.initial, initial.p], [medial.medial, medial.p],
    [final.final, final.p]].map(([letter, p]) => `${visible(letter)} ${percent(p)}`).join(" · ");
  return [line];
}

function paneOf(span) {
  return span.closest("#pane-b") ? panes.b : panes.a;
}

function onHover(e) {
  const span = e.target.closest(".ch");
  if (!span) return;
  showTooltip(span, paneOf(span).chars[Number(span.dataset.index)]);
}

async function onClick(e) {
  const span = e.target.closest(".ch");
  if (!span) return;
  const pane = paneOf(span);
  const index = Number(span.dataset.index);
  const event = pane.chars[index];
  document.querySelectorAll(".ch.selected").forEach((s) => s.classList.remove("selected"));
  span.classList.add("selected");
  // The token before this character is the query whose output chose it: show what that query looked at.
  const text = pane.context + pane.chars.slice(0, index + 1).map((c) => c.text).join("");
  const res = await fetch("/api/attention", { method: "POST", headers: { "Content-Type": "application/json" },
                                              body: JSON.stringify({ run: pane.run, text, position: event.pos - 1 }) });
  const data = await res.json();
  if (!res.ok) return setStatus("오류 · error: " + data.error, true);
  drawAttention(pane, event, data);
}

function drawAttention(pane, event, data) {
  $("attention-caption").textContent = `‘${visible(event.text)}’ 글자를 쓸 때 각 헤드가 본 글자 · what each head ` +
    `looked at when writing ‘${visible(event.text)}’ (${pane.key.toUpperCase()} · ${pane.run}, position ${event.pos})`;
  const blocks = data.weights.map((heads, b) => {
    const section = document.createElement("div");
    section.className = "block";
    section.innerHTML = `<h3>블록 · block ${b + 1}</h3>`;
    const table = document.createElement("table");
    table.className = "heads";
    heads.forEach((row, h) => {
      const tr = table.insertRow();
      tr.appendChild(document.createElement("th")).textContent = `head ${h + 1}`;
      const top = Math.max(...row);
      row.forEach((w, k) => {
        const td = tr.insertCell();
        td.textContent = visible(data.tokens[k]);
        // Shaded against the head's own strongest weight, so a head that spreads its attention still shows
        // where it looked most; the tooltip gives the absolute weight.
        td.style.setProperty("--w", (0.85 * w / top).toFixed(3));
        td.title = `${visible(data.tokens[k])}: ${(100 * w).toFixed(1)}%`;
        if (w / top > 0.6) td.classList.add("strong");
      });
    });
    section.appendChild(table);
    return section;
  });
  $("attention-grid").replaceChildren(...blocks);
  $("attention").hidden = false;
}

$("controls").addEventListener("submit", generate);
$("stop").addEventListener("click", () => aborter && aborter.abort());
$("compare").addEventListener("change", () => {
  $("run-b").disabled = !$("compare").checked;
  $("pane-b").hidden = !$("compare").checked;
});
$("panes").addEventListener("mouseover", onHover);
$("panes").addEventListener("mouseout", (e) => { if (e.target.closest(".ch")) $("tooltip").hidden = true; });
$("panes").addEventListener("click", onClick);
loadRuns().catch((err) => setStatus("실행 목록 오류 · cannot list runs: " + err.message, true));
