// The page of `rckit serve`: asks POST /v1/answer and marks the answer in the passage; "Inside"
// shows POST /v1/explain's drawing of why the model chose it. A server of several models
// (GET /v1/models) gets a model selector, and "Compare", which asks each of them the same question.
// User text only ever enters the page as DOM text nodes, never as HTML; the one page of HTML it
// shows, the explanation, is drawn by the server with every text escaped and shown in a sandboxed
// frame where no script runs.
"use strict";

const TOP_K = 5;
const KEY = "rckit-key";  // sessionStorage: the server's key, kept for this tab only
const AROUND = 50;  // Compare: characters of the passage shown on each side of an answer
const $ = (id) => document.getElementById(id);

// GET /v1/models' list, the default first; the selector is shown only when it holds several.
// `modelsShown`: the request that fills it (an answer waits for it before offering "Inside").
let models = [];
let modelsShown = Promise.resolve(false);

// The model chosen in the selector, or null: the server's default (a server of one model).
function chosenModel() {
  return models.length > 1 ? $("model-select").value : null;
}

// Whether the served model `name` (null: the default) can explain its answers (rckit's own reader
// cannot yet): "Inside" is offered only for one that can.
function explains(name) {
  const m = models.find((x) => (name ? x.name === name : x.default));
  return !m || m.explains !== false;
}

// A request body naming the chosen model, where there is a choice.
function withModel(payload, model = chosenModel()) {
  return model ? { ...payload, model } : payload;
}

// A server started with a key answers 401 to every API call without it: the page asks for the
// key once, keeps it for the tab and sends it as a Bearer header; a 401 forgets it and asks again.
function askForKey(message) {
  $("key-hint").textContent = message;
  $("key-form").hidden = false;
  $("key").focus();
  setState("key");
}

async function api(path, options = {}) {
  const key = sessionStorage.getItem(KEY);
  const headers = { ...(options.headers || {}), ...(key ? { Authorization: `Bearer ${key}` } : {}) };
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) {
    sessionStorage.removeItem(KEY);
    askForKey(key ? "That key was not accepted: enter the server's key again." :
      "This server needs a key. The page keeps it for this tab only.");
    throw new Error("this server needs a key: enter it above, then ask again");
  }
  return response;
}

async function useKey(event) {
  event.preventDefault();
  const key = $("key").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY, key);
  $("key").value = "";
  $("key-form").hidden = true;
  setState("");
  modelsShown = showModels();
  if (!(await modelsShown)) return;  // refused: the form is back, saying so
  await showIndex();
  await showLabels();
  setState("ready");
}

// The server's offsets count Unicode code points (Python strings); JavaScript strings count
// UTF-16 units, so slice by code points or a passage with an emoji would be marked off by one.
function codePointSlice(points, start, end) {
  return points.slice(start, end).join("");
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

// "asking", "answered" or "error": for whoever drives the page (tests, scripts).
function setState(state) {
  document.body.dataset.state = state;
}

function post(path, payload) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(payload),
  });
}

// What a refused request's JSON line says, as an Error.
async function refusal(response) {
  try {
    const body = await response.json();
    return new Error(body.error || `the server answered ${response.status}`);
  } catch {
    return new Error(`the server answered ${response.status} ${response.statusText}`);
  }
}

// POST a JSON body; the parsed answer, or an Error saying what the server said.
async function postJSON(path, payload) {
  const response = await post(path, payload);
  if (!response.ok) throw await refusal(response);
  try {
    return await response.json();
  } catch {
    throw new Error(`the server answered ${response.status} ${response.statusText}, not JSON`);
  }
}

function markPassage(context, span) {
  const box = $("answer");
  box.replaceChildren();
  const points = Array.from(context);
  if (span.start === null) {  // the model says the passage holds no answer: say so, the passage unmarked
    const note = document.createElement("p");
    note.className = "no-answer-note";
    const p = span.no_answer_probability;
    // "sure" only where the probability says so (a null model abstains at a margin, whatever its p)
    note.textContent = "No answer in this passage" + (p === null || p === undefined || p < 0.5 ? "" :
      ` (${(100 * p).toFixed(1)}% sure)`) + ". " + (span.reason ?
      "Underlined: the sentence nearest to the question, to check that it does not say. " : "") +
      "The reader's best guesses are listed below.";
    box.append(note);
    if (!span.reason) {
      box.append(document.createTextNode(context));
      return;
    }
    const nearest = document.createElement("span");  // the reason: where the passage comes nearest
    nearest.className = "nearest";
    nearest.textContent = codePointSlice(points, span.reason.start, span.reason.end);
    box.append(
      document.createTextNode(codePointSlice(points, 0, span.reason.start)),
      nearest,
      document.createTextNode(codePointSlice(points, span.reason.end, points.length)),
    );
    return;
  }
  const mark = document.createElement("mark");
  mark.textContent = codePointSlice(points, span.start, span.end);
  box.append(
    document.createTextNode(codePointSlice(points, 0, span.start)),
    mark,
    document.createTextNode(codePointSlice(points, span.end, points.length)),
  );
  mark.scrollIntoView({ block: "nearest" });
}

function showTopk(context, answers) {
  const list = $("topk");
  list.replaceChildren();
  answers.forEach((a, i) => {
    const item = document.createElement("li");
    const text = document.createElement("span");
    text.className = "text";
    text.textContent = a.start === null ? "No answer in this passage" : a.answer;
    if (a.start === null) item.classList.add("no-answer");
    const score = document.createElement("span");
    score.className = "score";
    const percent = Math.max(0, Math.min(100, a.score * 100));
    score.textContent = `${percent.toFixed(1)}%`;
    const bar = document.createElement("span");
    bar.className = "bar";
    bar.style.width = `${percent}%`;
    item.append(text, score, bar);
    item.title = "mark this answer in the passage";
    item.addEventListener("click", () => {
      for (const li of list.children) li.classList.toggle("current", li === item);
      markPassage(context, a);
    });
    if (i === 0) item.classList.add("current");
    list.append(item);
  });
}

// "Inside": the explanation of the answer shown, drawn by the server (POST /v1/explain?format=html)
// as a page that needs nothing else, shown in a frame sized to it. `asked` is what the answer shown
// answers; `explaining` counts the panel's requests, so that one overtaken by a new question is dropped.
let asked = null;
let explaining = 0;

function hideInside() {
  explaining += 1;
  $("inside").hidden = true;
  $("inside-frame").removeAttribute("srcdoc");
  $("inside-button").disabled = false;
  $("inside-button").textContent = "Inside";
}

// The frame as tall as its page, so that nothing in it scrolls but its wide heat maps. The page's
// own height, not its scrollHeight: that is never less than the frame, so a frame made wider would
// never shrink to its shorter page.
function fitInside() {
  const frame = $("inside-frame");
  const page = frame.contentDocument && frame.contentDocument.documentElement;
  const border = frame.offsetHeight - frame.clientHeight;  // its height is its border box's
  if (page) frame.style.height = `${Math.ceil(page.getBoundingClientRect().height) + border}px`;
}

function loaded(frame, page) {
  return new Promise((resolve) => {
    frame.addEventListener("load", resolve, { once: true });
    frame.srcdoc = page;
  });
}

async function showInside() {
  if (!asked) return;
  const ticket = ++explaining;
  const button = $("inside-button");
  const frame = $("inside-frame");
  const box = $("inside-error");
  box.hidden = true;
  frame.hidden = true;
  $("inside-wait").hidden = false;
  $("inside").hidden = false;
  button.disabled = true;
  button.textContent = "Looking inside…";
  setState("explaining");
  try {
    const response = await post("/v1/explain?format=html", asked);
    if (!response.ok) throw await refusal(response);
    const page = await response.text();
    if (ticket !== explaining) return;  // a new question came meanwhile
    frame.hidden = false;
    await loaded(frame, page);
    fitInside();
    // Its switches (the other attention, every passage word) change its height.
    frame.contentDocument.addEventListener("change", () => requestAnimationFrame(fitInside));
    setState("explained");
  } catch (e) {
    if (ticket !== explaining) return;
    frame.hidden = true;
    box.textContent = `Could not look inside: ${e.message}`;
    box.hidden = false;
    setState("error");
  } finally {
    if (ticket === explaining) {
      $("inside-wait").hidden = true;
      button.disabled = false;
      button.textContent = "Inside";
    }
  }
}

async function ask(event) {
  if (event) event.preventDefault();
  const context = $("context").value;
  const question = $("question").value;
  const button = $("ask");
  showError("");
  hideInside();
  $("compare").hidden = true;
  if (!context.trim() || !question.trim()) {
    showError(!context.trim() ? "Write or paste a passage first." : "Write a question first.");
    setState("error");
    return;
  }
  setState("asking");
  button.disabled = true;
  button.textContent = "Asking…";
  const t0 = performance.now();
  try {
    const model = chosenModel();  // as chosen when asked, for "Inside" too
    const body = await postJSON("/v1/answer", withModel({ context, question, top_k: TOP_K }, model));
    const answers = body.answers;
    if (!answers.length) throw new Error("the model gave no answer");
    markPassage(context, answers[0]);
    showTopk(context, answers);
    asked = withModel({ context, question }, model);  // "Inside" explains with the model that answered
    await modelsShown;
    $("inside-row").hidden = !explains(model);
    const total = performance.now() - t0;
    $("took").textContent = `Answered in ${Math.round(total)} ms (${Math.round(body.ms)} ms in the server) by ${body.model}.`;
    $("result").hidden = false;
    setState("answered");
  } catch (e) {
    showError(`Could not answer: ${e.message}`);
    setState("error");
  } finally {
    button.disabled = false;
    button.textContent = "Ask";
  }
}

// "Compare": the same question to every served model at once, one POST /v1/answer each; one row a
// model, filled as its answer comes: its name, its answer marked in an excerpt of the passage
// around it, its probability and the server's milliseconds.
function passageAround(context, a) {
  const box = document.createElement("span");
  box.className = "excerpt";
  if (a.start === null) {
    box.classList.add("no-answer");
    box.textContent = "No answer in this passage";
    return box;
  }
  const points = Array.from(context);
  let lo = Math.max(0, a.start - AROUND);
  let hi = Math.min(points.length, a.end + AROUND);
  // Whole words only: from just after the first space, to just before the last.
  if (lo > 0) {
    const space = points.slice(lo, a.start).findIndex((c) => /\s/.test(c));
    if (space >= 0) lo += space + 1;
  }
  if (hi < points.length) {
    const tail = points.slice(a.end, hi);
    let k = tail.length - 1;
    while (k >= 0 && !/\s/.test(tail[k])) k -= 1;
    if (k >= 0) hi = a.end + k;
  }
  const mark = document.createElement("mark");
  mark.textContent = codePointSlice(points, a.start, a.end);
  const after = codePointSlice(points, a.end, hi);
  box.append(
    document.createTextNode((lo > 0 ? "…" : "") + codePointSlice(points, lo, a.start)),
    mark,
    document.createTextNode(after + (hi === points.length ? "" : /[.!?;:,]$/.test(after) ? " …" : "…")),
  );
  return box;
}

function cell(className, text = "") {
  const span = document.createElement("span");
  span.className = className;
  span.setAttribute("role", "cell");
  span.textContent = text;
  return span;
}

// A model's name, and under it its architecture (where the name is not it) and its F1.
function modelCell(m) {
  const name = cell("compare-name");
  const strong = document.createElement("strong");
  strong.textContent = m.name;
  const about = document.createElement("span");
  about.className = "about";
  about.textContent = [m.model !== m.name ? m.model : "", f1Of(m) === null ? "" : `F1 ${f1Of(m).toFixed(1)}`]
    .filter(Boolean).join(" · ");
  name.append(strong, about);
  return name;
}

async function compare() {
  const context = $("context").value;
  const question = $("question").value;
  const button = $("compare-button");
  showError("");
  hideInside();
  if (!context.trim() || !question.trim()) {
    showError(!context.trim() ? "Write or paste a passage first." : "Write a question first.");
    setState("error");
    return;
  }
  $("result").hidden = true;
  setState("comparing");
  button.disabled = true;
  button.textContent = "Comparing…";
  const rows = models.map((m) => {
    const row = document.createElement("div");
    row.className = "compare-row";
    row.setAttribute("role", "row");
    row.dataset.model = m.name;
    const answer = cell("compare-answer", "asking…");
    answer.classList.add("waiting");
    row.append(modelCell(m), answer, cell("num prob"), cell("num ms"));
    return row;
  });
  $("compare-rows").replaceChildren(...rows);
  $("compare-took").textContent = "";
  $("compare").hidden = false;
  const t0 = performance.now();
  const one = async (m, row) => {
    const [, answerCell, prob, ms] = row.children;
    answerCell.classList.remove("waiting");
    try {
      const body = await postJSON("/v1/answer", { context, question, model: m.name, top_k: 1 });
      const best = body.answers[0];
      answerCell.replaceChildren(passageAround(context, best));
      const percent = Math.max(0, Math.min(100, best.score * 100));
      prob.textContent = `${percent.toFixed(1)}%`;
      ms.textContent = `${Math.round(body.ms)} ms`;
    } catch (e) {
      answerCell.textContent = `Could not answer: ${e.message}`;
      answerCell.classList.add("error-text");
      row.classList.add("failed");
    }
  };
  await Promise.all(models.map((m, i) => one(m, rows[i])));
  $("compare-took").textContent = `${models.length} models asked at once, all answered in ${Math.round(performance.now() - t0)} ms (each row: its time in the server).`;
  button.disabled = false;
  button.textContent = "Compare";
  setState(rows.some((r) => r.classList.contains("failed")) ? "error" : "compared");
}

// The tabs: a passage; every document of the server's index (POST /v1/ask); labelling (POST /v1/labels).
const TABS = { passage: "Ask a passage", collection: "Ask your documents", label: "Label your documents" };

function showTab(name) {
  for (const tab of Object.keys(TABS)) {
    $(`${tab}-view`).hidden = tab !== name;
    $(`tab-${tab}`).setAttribute("aria-selected", String(tab === name));
  }
  $("title").textContent = TABS[name];
}

// A tab beside the passage's: shown, and with it the row of tabs.
function offerTab(name) {
  $(`tab-${name}`).hidden = false;
  $("tabs").hidden = false;
}

function foundItem(a) {
  const item = document.createElement("li");
  const line = document.createElement("div");
  line.className = "answer-line";
  if (a.start === null) {
    item.classList.add("no-answer");
    line.textContent = "No answer in these documents";
    item.append(line);
    return item;
  }
  line.textContent = a.answer;
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = `${(Math.max(0, Math.min(1, a.score)) * 100).toFixed(1)}%`;
  line.append(score);
  const doc = document.createElement("div");
  doc.className = "doc";
  const name = a.source.split(/[\\/]/).pop();
  doc.textContent = a.title && a.title !== name ? `${a.title} · ${name}` : name;
  if (a.key) doc.textContent += ` [${a.key}]`;
  doc.title = a.source;
  // Where in the file: the page (PDF) and the section (the heading above the answer).
  const where = [];
  if (a.page !== null && a.page !== undefined) where.push(`page ${a.page}`);
  if (a.section) where.push(`§ ${a.section}`);
  if (where.length) {
    const place = document.createElement("span");
    place.className = "where";
    place.textContent = where.join(" · ");
    doc.append(document.createTextNode(" · "), place);
  }
  // The passage, the answer marked: offsets are code points of the document, the passage's own start first.
  const points = Array.from(a.passage.text);
  const s = a.start - a.passage.start, e = a.end - a.passage.start;
  const passage = document.createElement("div");
  passage.className = "passage";
  const mark = document.createElement("mark");
  mark.textContent = codePointSlice(points, s, e);
  passage.append(document.createTextNode(codePointSlice(points, 0, s)), mark,
                 document.createTextNode(codePointSlice(points, e, points.length)));
  item.append(line, doc, passage);
  return item;
}

async function askCollection(event) {
  if (event) event.preventDefault();
  const question = $("collection-question").value;
  const box = $("collection-error");
  box.hidden = true;
  if (!question.trim()) {
    box.textContent = "Write a question first.";
    box.hidden = false;
    setState("error");
    return;
  }
  setState("asking");
  const button = $("collection-ask");
  button.disabled = true;
  const t0 = performance.now();
  try {
    const body = await postJSON("/v1/ask", withModel({ question, top_k: 3 }));
    $("found").replaceChildren(...body.answers.map(foundItem));
    $("collection-took").textContent = `Answered in ${Math.round(performance.now() - t0)} ms by ${body.model}.`;
    $("collection-result").hidden = false;
    setState("answered");
  } catch (e) {
    box.textContent = `Could not answer: ${e.message}`;
    box.hidden = false;
    setState("error");
  } finally {
    button.disabled = false;
  }
}

async function showIndex() {
  try {
    const response = await api("/v1/index");
    if (!response.ok) return;  // no index: the page keeps its one tab
    const index = await response.json();
    hasIndex = true;
    offerTab("collection");
    $("label-find-hint").hidden = false;
    $("collection-hint").textContent = `Ask a question of the ${index.documents.toLocaleString("en")} documents in the server's index: the best passages are found, then read.`;
  } catch {
    // Without the index the passage tab still works.
  }
}

// The Label tab (a server started with --labels FILE): a question about a passage, the model's
// answer marked to accept or correct by selecting other words with the mouse, saved to the
// server's SQuAD file. Offsets are code points of the passage, as the server counts them.
let hasIndex = false;
let labelling = null;  // { context, start, end }: the passage read and the answer chosen in it

function labelError(message) {
  $("label-error").textContent = message;
  $("label-error").hidden = !message;
}

function showLabelCount(body) {
  const n = body.questions;
  $("label-count").textContent = `${n.toLocaleString("en")} question${n === 1 ? "" : "s"} labelled in ${body.file}` +
    ` (${body.documents.toLocaleString("en")} document${body.documents === 1 ? "" : "s"}).`;
}

async function showLabels() {
  try {
    const response = await api("/v1/labels");
    if (!response.ok) return;  // no labels file: no Label tab
    showLabelCount(await response.json());
    offerTab("label");
  } catch {
    // The other tabs still work.
  }
}

function markLabel() {
  const points = Array.from(labelling.context);
  const { start, end } = labelling;
  const box = $("label-passage");
  if (start === null) {
    box.replaceChildren(document.createTextNode(labelling.context));
    $("label-chosen").textContent = "The model found no answer: select it with the mouse.";
    $("label-save").disabled = true;
    return;
  }
  const mark = document.createElement("mark");
  mark.textContent = codePointSlice(points, start, end);
  box.replaceChildren(document.createTextNode(codePointSlice(points, 0, start)), mark,
                      document.createTextNode(codePointSlice(points, end, points.length)));
  $("label-chosen").textContent = `${labelling.by}: “${mark.textContent}”`;
  $("label-save").disabled = false;
}

async function suggest(event) {
  if (event) event.preventDefault();
  const question = $("label-question").value;
  let context = $("label-context").value;
  labelError("");
  if (!question.trim()) {
    labelError("Write a question first.");
    setState("error");
    return;
  }
  if (!context.trim() && !hasIndex) {
    labelError("Paste a passage first.");
    setState("error");
    return;
  }
  setState("asking");
  $("label-suggest").disabled = true;
  try {
    let span;
    if (!context.trim()) {  // the passage found in the server's documents, with its file's name
      const found = (await postJSON("/v1/ask", withModel({ question, top_k: 1 }))).answers[0];
      if (!found || !found.passage) throw new Error("no passage of the server's documents answers it");
      context = found.passage.text;
      $("label-context").value = context;
      const name = found.source.split(/[\\/]/).pop();  // a file's record: its key beside the file's name
      $("label-document").value = found.key ? `${name} [${found.key}]` : name;
      span = found.start === null ? null : { start: found.start - found.passage.start, end: found.end - found.passage.start };
    } else {
      const a = (await postJSON("/v1/answer", withModel({ context, question }))).answers[0];
      span = !a || a.start === null ? null : { start: a.start, end: a.end };
    }
    labelling = { context, start: span ? span.start : null, end: span ? span.end : null, by: "The model's answer" };
    markLabel();
    $("label-answer").hidden = false;
    setState("suggested");
  } catch (e) {
    labelError(`Could not suggest an answer: ${e.message}`);
    setState("error");
  } finally {
    $("label-suggest").disabled = false;
  }
}

// The words selected in the passage become the answer: offsets from the selection's place in the
// passage's text, white space at its ends left out.
function chooseSelection() {
  const selection = window.getSelection();
  const box = $("label-passage");
  if (!labelling || !selection.rangeCount || selection.isCollapsed) return;
  const range = selection.getRangeAt(0);
  if (!box.contains(range.startContainer) || !box.contains(range.endContainer)) return;
  const before = document.createRange();
  before.selectNodeContents(box);
  before.setEnd(range.startContainer, range.startOffset);
  const units = before.toString().length;  // UTF-16 units, as JavaScript counts
  const text = labelling.context;
  let start = Array.from(text.slice(0, units)).length;
  let end = start + Array.from(range.toString()).length;
  const points = Array.from(text);
  while (start < end && /\s/.test(points[start])) start += 1;
  while (end > start && /\s/.test(points[end - 1])) end -= 1;
  selection.removeAllRanges();
  if (start === end) return;
  labelling = { ...labelling, start, end, by: "Your answer" };
  markLabel();
}

async function saveLabel() {
  if (!labelling || labelling.start === null) return;
  const points = Array.from(labelling.context);
  const body = {
    document: $("label-document").value.trim() || "pasted passages",
    context: labelling.context,
    question: $("label-question").value,
    answer: codePointSlice(points, labelling.start, labelling.end),
    answer_start: labelling.start,
  };
  labelError("");
  $("label-save").disabled = true;
  try {
    const saved = await postJSON("/v1/labels", body);
    showLabelCount(saved);
    $("label-answer").hidden = true;
    $("label-question").value = "";  // the passage stays: the next question is often about it too
    $("label-question").focus();
    labelling = null;
    setState("labelled");
  } catch (e) {
    labelError(`Could not save the label: ${e.message}`);
    setState("error");
  } finally {
    $("label-save").disabled = false;
  }
}

// A model's F1: its recorded score on a whole file, else its dev F1 from training; null if unknown.
function f1Of(m) {
  const recorded = (m.scores || []).find((s) => typeof s.f1 === "number");
  if (recorded) return recorded.f1;
  return m.dev_score && typeof m.dev_score.dev_f1 === "number" ? m.dev_score.dev_f1 : null;
}

// The served models (GET /v1/models): their names in the footer, and with several, the selector
// (the default chosen) and Compare. Whether the server answered (false: no key, or no answer).
async function showModels() {
  try {
    const response = await api("/v1/models");
    if (!response.ok) return false;
    models = (await response.json()).models;
    const several = models.length > 1;
    $("model").textContent = models.length ? ` · model${several ? "s" : ""}: ${models.map((m) => m.name).join(", ")}` : "";
    const select = $("model-select");
    select.replaceChildren(...models.map((m) => {
      const option = document.createElement("option");
      option.value = m.name;
      const f1 = f1Of(m);
      option.textContent = m.name + (m.model !== m.name ? ` (${m.model})` : "") + (f1 === null ? "" : ` · F1 ${f1.toFixed(1)}`);
      option.selected = m.default;
      return option;
    }));
    $("model-row").hidden = !several;
    $("compare-button").hidden = !several;
    $("compare-hint").hidden = !several;
    return true;
  } catch {
    return false;  // the footer stays plain; asking still works or says why not
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", useKey);
  $("ask-form").addEventListener("submit", ask);
  $("context").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) ask(e);
  });
  $("collection-form").addEventListener("submit", askCollection);
  $("inside-button").addEventListener("click", showInside);
  $("compare-button").addEventListener("click", compare);
  window.addEventListener("resize", () => requestAnimationFrame(fitInside));
  $("tab-passage").addEventListener("click", () => showTab("passage"));
  $("tab-collection").addEventListener("click", () => showTab("collection"));
  $("tab-label").addEventListener("click", () => showTab("label"));
  $("label-form").addEventListener("submit", suggest);
  $("label-passage").addEventListener("mouseup", chooseSelection);
  $("label-save").addEventListener("click", saveLabel);
  modelsShown = showModels();
  showIndex();
  showLabels();
});
