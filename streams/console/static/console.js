// claimstream steward console. Plain DOM: every value from the API goes into the page as text
// (textContent, attributes set one by one), never as markup, so a claim saying <script> is shown.
"use strict";

// `me`: the steward the token is bound to, as GET /api/console (or a write's answer) names them.
const state = { config: null, token: sessionStorage.getItem("claimstream.steward") || "", me: "", view: null };
const OPEN = new Set(["conflict", "quarantined"]);
const DIM_ROLES = new Set(["stale", "superseded", "excluded"]);
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function showValue(value, unit) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "object" && "amount_minor" in value) {
    return `${(value.amount_minor / 100).toFixed(2)} ${value.currency}`;
  }
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return unit ? `${text} ${unit}` : text;
}

function said(item) {
  return item.status && item.status !== "present" ? item.status : showValue(item.value);
}

function instant(iso) {
  // Shown to the second; the exact instant stays in the title (and in the API).
  if (!iso) return "—";
  return el("time", { datetime: iso, title: iso }, iso.replace("T", " ").replace(/(\d\d:\d\d:\d\d)[.\d]*(Z|[+-]\d\d:\d\d)$/, "$1$2"));
}

function retraction(change) {
  // A split a later merge of the same spelling undid says so: the split no longer stands.
  const later = change.superseded_by;
  return later ? `retracted (superseded ${later.at.replace("T", " ").replace(/[.]\d+/, "")}: → ${later.canonical})` : "retracted";
}

function badge(outcome, kind) {
  return el("span", { class: `badge ${outcome}` }, kind ? `${outcome} · ${kind}` : outcome);
}

function ago(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

function keyHref(key) {
  return `#/key/${encodeURIComponent(key)}`;
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body = null;
  try { body = await response.json(); } catch (_) { body = { error: `HTTP ${response.status}` }; }
  return { ok: response.ok, status: response.status, body };
}

function render(...nodes) {
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

// ---- erased subjects -----------------------------------------------------------------------
// A read of an erased subject answers 410 with the erasure (its request's id and instant) and no
// value: the page says so, and shows nothing else of the key.

const ERASED = 410;

function erasedPanel(body, id) {
  return el("div", { class: "card erased", id, role: "status", "data-erased": body.erasure_id },
    el("h2", {}, "Erased"),
    el("p", {}, "This subject's data was erased by request ", el("span", { class: "id" }, body.erasure_id),
      " at ", el("time", { datetime: body.erased_at }, body.erased_at), ". No value is kept."),
    el("p", {}, el("a", { href: `#/erasures?subject=${encodeURIComponent(body.key.slice(0, body.key.lastIndexOf("|")))}` }, "See the erasure")));
}

function problem(answer) {
  // What a failed read says: an erasure in words, or the API's error.
  const body = answer.body || {};
  return answer.status === ERASED ? `erased by request ${body.erasure_id} at ${body.erased_at}` : body.error;
}

// ---- live decisions ------------------------------------------------------------------------

let source = null;
function follow(key) {
  if (source) source.close();
  const live = document.getElementById("live");
  source = new EventSource(key ? `/api/live?key=${encodeURIComponent(key)}` : "/api/live");
  source.addEventListener("open", () => { live.textContent = "live"; live.className = "live on"; });
  source.addEventListener("error", () => { live.textContent = "reconnecting"; live.className = "live off"; });
  source.addEventListener("hello", () => state.view && state.view.refresh());
  source.addEventListener("lagged", () => state.view && state.view.refresh());
  source.addEventListener("decision", (message) => {
    const event = JSON.parse(message.data);
    if (state.view) state.view.onDecision(event);
  });
}

function debounce(fn, ms) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, ms); };
}

// ---- the queue -----------------------------------------------------------------------------
// Each row is a steward's task: who holds it (the last `assign` names them; their lease lapses
// `review.lease` after their last statement on the key), when it is due (open past the field's
// escalate_after: overdue), how many proposals on it wait for review. Take, Release and Hand to
// publish `assign` statements; the selected rows' proposals are approved, or their tasks taken,
// in one POST /api/resolutions/batch, each row then told its own answer.

const QUEUE_POLL_MS = 5000; // an assignment or a proposal changes no decision: the live feed does not bring it
const SETTLE_MS = 400; // after a write, how often the page looks for the owner to have taken it
const SETTLE_TRIES = 25;
const BATCH_MAX = 500; // POST /api/resolutions/batch takes at most this many statements
const READS_AT_ONCE = 8; // a bulk approval reads each key's proposal and basis, this many at a time
const TIMER_MAX_MS = 600000;

function canWrite() {
  return Boolean(state.config && state.config.writes_enabled && state.token);
}

function bearer() {
  return { "Content-Type": "application/json", Authorization: `Bearer ${state.token}` };
}

async function whoAmI() {
  // GET /api/console names the steward the token is bound to (null for none, or a bad one).
  state.me = "";
  if (state.token) {
    const { ok, body } = await api("/api/console", { headers: { Authorization: `Bearer ${state.token}` } });
    if (ok && body.steward) state.me = body.steward;
  }
  showName();
}

function learnName(name) {
  // A write's answer names its author, the token's steward: the page's name for "mine" and Take.
  if (name && name !== state.me) { state.me = name; showName(); }
}

function showName() {
  const node = document.getElementById("steward-name");
  if (node) node.textContent = state.me && state.token ? `as ${state.me}` : "";
}

function clockTime(iso) {
  // An instant to the second, in UTC (the date too where it is not today's); exact in the title.
  if (!iso) return "—";
  const text = new Date(iso).toISOString();
  const today = text.slice(0, 10) === new Date().toISOString().slice(0, 10);
  return el("time", { datetime: iso, title: iso }, `${today ? "" : `${text.slice(0, 10)} `}${text.slice(11, 19)}Z`);
}

async function writeOne(statement) {
  // One statement, POST /api/resolutions: its answer as a batch's item is ({status, resolution}
  // or {status, refused, error}).
  let answer;
  try {
    answer = await api("/api/resolutions", { method: "POST", headers: bearer(), body: JSON.stringify(statement) });
  } catch (error) {
    return { status: 0, refused: "unreachable", error: String(error) };
  }
  if (!answer.ok) return { status: answer.status, refused: answer.body.refused, error: answer.body.error };
  learnName(answer.body.resolution.decided_by);
  return { status: answer.status, resolution: answer.body.resolution };
}

async function writeMany(statements) {
  // POST /api/resolutions/batch (one request for each BATCH_MAX statements), answered per item:
  // the answers in the statements' order.
  const answers = new Array(statements.length);
  for (let start = 0; start < statements.length; start += BATCH_MAX) {
    const part = statements.slice(start, start + BATCH_MAX);
    let reply;
    try {
      reply = await api("/api/resolutions/batch", { method: "POST", headers: bearer(), body: JSON.stringify({ statements: part }) });
    } catch (error) {
      reply = { ok: false, status: 0, body: { refused: "unreachable", error: String(error) } };
    }
    if (!reply.ok) {
      part.forEach((_, i) => { answers[start + i] = { status: reply.status, refused: reply.body.refused, error: reply.body.error }; });
      continue;
    }
    for (const item of reply.body.results) {
      answers[start + item.index] = item;
      if (item.status === 202) learnName(item.resolution.decided_by);
    }
  }
  return answers;
}

async function eachAtMost(items, limit, fn) {
  // fn over every item, at most `limit` at a time: the answers in the items' order.
  const out = new Array(items.length);
  let next = 0;
  const lane = async () => { while (next < items.length) { const i = next++; out[i] = await fn(items[i], i); } };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return out;
}

function refusedWords(answer) {
  return `Refused${answer.refused ? ` (${answer.refused})` : ""}: ${answer.error || `HTTP ${answer.status}`}`;
}

async function proposalToApprove(key) {
  // The key's one pending proposal and the basis the steward approves it as seen (the key's
  // decision now and the digest of its evidence, as GET /api/decisions/{key} gives them); or
  // why there is nothing to approve.
  const [now, history] = await Promise.all([
    api(`/api/decisions/${encodeURIComponent(key)}`),
    api(`/api/decisions/${encodeURIComponent(key)}/history`),
  ]);
  if (!now.ok || !history.ok) return { skip: problem(now.ok ? history : now) };
  const pending = (history.body.steward_log || []).filter((s) => s.standing === "pending" && PROPOSAL_ACTS.has(s.act));
  if (!pending.length) return { skip: "no proposal waits for review" };
  if (pending.length > 1) return { skip: `${pending.length} proposals wait: choose one on the key's page` };
  const [proposal] = pending;
  const basis = now.body.basis;
  return {
    proposal,
    authorCounts: Boolean((now.body.rules.review || {}).author_may_approve),
    statement: { key, act: "approve", target_id: proposal.resolution_id, resolves_decision_id: basis.decision_id, basis_digest: basis.evidence_digest },
  };
}

function queueView(params) {
  const filters = new URLSearchParams(params);
  const writable = canWrite();
  const table = el("tbody");
  const chips = el("div", { class: "chips" });
  const workers = el("p", { class: "muted", id: "workers" });
  const fieldSelect = el("select", { name: "field" }, el("option", { value: "" }, "any field"),
    state.config.fields.map((f) => el("option", { value: f }, f)));
  const kindSelect = el("select", { name: "kind" }, el("option", { value: "" }, "any kind"),
    state.config.conflict_kinds.map((k) => el("option", { value: k }, k)));
  const sourceSelect = el("select", { name: "source" }, el("option", { value: "" }, "any source"),
    state.config.sources.map((s) => el("option", { value: s }, s)));
  const ageSelect = el("select", { name: "min_age_s" },
    [["", "any age"], ["60", "open ≥ 1 min"], ["300", "≥ 5 min"], ["900", "≥ 15 min"], ["3600", "≥ 1 h"]]
      .map(([v, label]) => el("option", { value: v }, label)));
  const selects = [fieldSelect, kindSelect, sourceSelect, ageSelect];
  const heldBy = filters.get("assignee") || "";
  const mineBox = el("input", { type: "checkbox", id: "filter-mine", checked: Boolean(heldBy) });
  const unassignedBox = el("input", { type: "checkbox", id: "filter-unassigned", checked: filters.get("unassigned") === "1" });
  const overdueBox = el("input", { type: "checkbox", id: "filter-overdue", checked: filters.get("overdue") === "1" });
  const mineLabel = el("span", { id: "mine-label" });
  const filterNote = el("span", { class: "muted", id: "filter-note" });

  function go(changed) {
    // "Mine" and "unassigned" exclude each other; "mine" is the tasks the token's steward holds.
    if (changed === mineBox && mineBox.checked) unassignedBox.checked = false;
    if (changed === unassignedBox && unassignedBox.checked) mineBox.checked = false;
    if (mineBox.checked && !state.me && !heldBy) {
      mineBox.checked = false;
      filterNote.textContent = canWrite() ? "Your token names no steward here." : "Enter a steward token (top right) to see your tasks.";
      return;
    }
    const next = new URLSearchParams();
    for (const s of selects) if (s.value) next.set(s.name, s.value);
    if (mineBox.checked) next.set("assignee", changed === mineBox || !heldBy ? state.me : heldBy);
    if (unassignedBox.checked) next.set("unassigned", "1");
    if (overdueBox.checked) next.set("overdue", "1");
    location.hash = `#/?${next}`;
  }
  for (const select of selects) {
    select.value = filters.get(select.name) || "";
    select.addEventListener("change", () => go(select));
  }
  for (const box of [mineBox, unassignedBox, overdueBox]) box.addEventListener("change", () => go(box));

  const shown = new Map(); // key -> its row
  let rows = []; // the rows as last answered
  let drawnAs = null; // what the rows were last drawn from, to redraw only what changed
  let asked = 0; // refreshes asked for: an answer to an older one is dropped
  const changed = new Set(); // keys a live event touched: highlighted until the next page
  const selected = new Set(); // keys picked for a bulk action
  const told = new Map(); // key -> what the steward was told of their last write on it
  const drafts = new Map(); // key -> the steward a "hand to" box names, kept across redraws
  let timer = null; // the refresh a lease's end or a due time asks for
  let settling = null; // after a write: looking again until the owner has taken it
  let busy = false; // a bulk action under way

  const selectAll = el("input", { type: "checkbox", id: "select-all", "aria-label": "select every row shown" });
  const selectedCount = el("span", { id: "selected-count", class: "muted" }, "0 selected");
  const approveButton = el("button", { type: "button", id: "bulk-approve", disabled: true }, "Approve selected proposals");
  const takeButton = el("button", { type: "button", id: "bulk-take", disabled: true }, "Take selected");
  const summary = el("p", { class: "status muted", id: "bulk-summary" });
  const report = el("div", { id: "bulk-report" });
  const heads = [writable ? el("th", { class: "pick" }, selectAll) : null, "Open for", "Subject", "Field", "Outcome",
    "Reason", "Sources", "Held by", "Due", "Review", "Worker", writable ? "Task" : null].filter(Boolean);

  function syncPicks() {
    for (const [key, tr] of shown) {
      const box = tr.querySelector("input.pick");
      if (box) box.checked = selected.has(key);
      tr.classList.toggle("selected", selected.has(key));
    }
    selectAll.checked = rows.length > 0 && selected.size === rows.length;
    selectAll.indeterminate = selected.size > 0 && selected.size < rows.length;
    selectedCount.textContent = `${selected.size} selected`;
    approveButton.disabled = busy || !selected.size;
    takeButton.disabled = busy || !selected.size || !state.me;
    takeButton.title = state.me ? `assign each selected task to ${state.me}` : "your token names no steward yet";
  }
  selectAll.addEventListener("change", () => {
    selected.clear();
    if (selectAll.checked) for (const row of rows) selected.add(row.key);
    syncPicks();
  });

  function tell(key, text, warn) {
    told.set(key, { text, warn: Boolean(warn) });
    const node = shown.get(key) && shown.get(key).querySelector("p.status");
    if (node) { node.textContent = text; node.className = `status ${warn ? "warn" : "muted"}`; }
  }

  function holderCell(row) {
    if (!row.assignee) return el("td", { class: "task" }, el("span", { class: "muted" }, "unassigned"));
    return el("td", { class: "task" }, el("span", { class: "holder" }, row.assignee),
      row.assignee === state.me ? el("span", { class: "muted" }, " (you)") : null,
      el("div", { class: "muted lease" }, "until ", clockTime(row.lease_until)));
  }

  function taskActions(row) {
    const key = row.key;
    const me = state.me;
    const mine = Boolean(me) && row.assignee === me;
    const other = row.assignee && !mine;
    const parts = [];
    if (!mine) {
      parts.push(el("button", { type: "button", class: "take", disabled: !me,
        title: !me ? "your token names no steward yet" : other ? `${row.assignee} holds it until ${row.lease_until}: a Take is refused until their lease lapses or they hand it on` : `assign the task to ${me}`,
        onclick: () => assign(row, me, "Taken") }, "Take"));
    } else {
      parts.push(el("button", { type: "button", class: "release", onclick: () => assign(row, null, "Released") }, "Release"));
    }
    if (!other) {
      const to = el("input", { type: "text", class: "hand-to", placeholder: "steward", autocomplete: "off", spellcheck: "false",
        "aria-label": `hand ${key} to`, value: drafts.get(key) || "" });
      to.addEventListener("input", () => drafts.set(key, to.value));
      const hand = () => {
        const name = to.value.trim();
        if (!name) { tell(key, "Name the steward to hand the task to.", true); to.focus(); return; }
        assign(row, name, `Handed to ${name}`);
      };
      to.addEventListener("keydown", (event) => { if (event.key === "Enter") { event.preventDefault(); hand(); } });
      parts.push(to, el("button", { type: "button", class: "hand", onclick: hand }, "Hand to"));
    }
    const note = told.get(key);
    parts.push(el("p", { class: `status ${note && note.warn ? "warn" : "muted"}` }, note ? note.text : ""));
    return el("div", { class: "task-actions" }, parts);
  }

  function queueRow(row) {
    const pick = writable ? el("input", { type: "checkbox", class: "pick", "aria-label": `select ${row.key}`, checked: selected.has(row.key) }) : null;
    if (pick) pick.addEventListener("change", () => { if (pick.checked) selected.add(row.key); else selected.delete(row.key); syncPicks(); });
    const classes = [changed.has(row.key) ? "fresh" : "", selected.has(row.key) ? "selected" : "", row.overdue ? "overdue" : ""].filter(Boolean).join(" ");
    const tr = el("tr", { "data-key": row.key, "data-assignee": row.assignee || "", "data-overdue": row.overdue ? "true" : "false", class: classes || null },
      pick ? el("td", { class: "pick" }, pick) : null,
      el("td", { class: "age" }, ago(row.age_s)),
      el("td", { class: "subject" }, el("a", { href: keyHref(row.key) }, row.subject)),
      el("td", { class: "field" }, row.field),
      el("td", { class: "outcome" }, badge(row.outcome, row.conflict_kind)),
      el("td", { class: "reason" }, row.reason),
      el("td", { class: "sources" }, row.sources.join(", ")),
      holderCell(row),
      el("td", { class: "due" }, row.overdue ? [el("span", { class: "badge overdue" }, "overdue"), " since "] : "by ", clockTime(row.due_at)),
      el("td", { class: "review" }, row.waiting_for_review ? el("span", { class: "badge waiting" }, `${row.waiting_for_review} to review`) : el("span", { class: "muted" }, "—")),
      el("td", { class: "worker muted" }, row.worker),
      writable ? el("td", { class: "actions" }, taskActions(row)) : null);
    shown.set(row.key, tr);
    return tr;
  }

  function draw() {
    // Drawn anew, the steward's place kept: the box they were typing in, by row and kind.
    const active = document.activeElement;
    const at = active && table.contains(active) && active.closest("tr[data-key]");
    const again = at ? [at.dataset.key, active.className] : null;
    shown.clear();
    table.replaceChildren(...rows.map(queueRow));
    if (!rows.length) table.replaceChildren(el("tr", {}, el("td", { colspan: heads.length, class: "muted" }, "No open conflicts.")));
    syncPicks();
    if (again) {
      const tr = shown.get(again[0]);
      const node = tr && [...tr.querySelectorAll("input, button")].find((n) => n.className === again[1]);
      if (node) node.focus();
    }
  }

  function schedule() {
    // Look again when a shown lease ends (the task is free then) or a task falls due.
    clearTimeout(timer);
    const now = Date.now();
    const next = rows.flatMap((r) => [r.lease_until, r.overdue ? null : r.due_at]).filter(Boolean)
      .map((iso) => Date.parse(iso) - now).filter((ms) => ms > 0 && ms < TIMER_MAX_MS);
    if (next.length) timer = setTimeout(() => { if (state.view === view) refresh(); }, Math.min(...next) + 250);
  }

  async function refresh() {
    const mine = ++asked;
    const { ok, body } = await api(`/api/conflicts?${filters}`);
    if (mine !== asked || state.view !== view) return;
    if (!ok) { workers.replaceChildren(el("span", { class: "warn" }, body.error)); return; }
    const answered = body.workers.filter((w) => w.answered).length;
    workers.replaceChildren(
      `${body.open_conflicts.length} open · ${answered} of ${body.workers.length} workers answered`,
      body.unanswered.length ? el("span", { class: "warn", id: "unanswered" }, ` · did not answer: ${body.unanswered.join(", ")}`) : "",
    );
    chips.replaceChildren(...Object.entries(body.counts_per_field).map(([field, count]) => {
      const next = new URLSearchParams(filters);
      if (filters.get("field") === field) next.delete("field"); else next.set("field", field);
      return el("a", { class: `chip${filters.get("field") === field ? " on" : ""}`, href: `#/?${next}` }, `${field} ${count}`);
    }));
    mineLabel.textContent = heldBy ? `Mine (${heldBy})` : state.me ? `Mine (${state.me})` : "Mine";
    rows = body.open_conflicts;
    const keys = new Set(rows.map((r) => r.key));
    for (const key of [...selected]) if (!keys.has(key)) selected.delete(key);
    const seen = JSON.stringify([rows.map((r) => [r.key, r.outcome, r.conflict_kind, r.reason, r.sources, r.assignee,
      r.lease_until, r.overdue, r.due_at, r.waiting_for_review, r.worker]), [...changed], state.me]);
    if (seen !== drawnAs) { drawnAs = seen; draw(); } else {
      for (const row of rows) { const cell = shown.get(row.key).querySelector("td.age"); cell.textContent = ago(row.age_s); }
      syncPicks();
    }
    schedule();
  }

  function settle(done, notTaken) {
    // After a write: look again until `done(rows by key)` (its owner has taken it), a while at
    // most; then `notTaken()`.
    clearInterval(settling);
    let tries = 0;
    const looking = setInterval(async () => {
      if (state.view !== view) { clearInterval(looking); return; }
      if (++tries > SETTLE_TRIES) { clearInterval(looking); if (notTaken) notTaken(); return; }
      await refresh();
      if (settling === looking && done(new Map(rows.map((r) => [r.key, r])))) clearInterval(looking);
    }, SETTLE_MS);
    settling = looking;
  }

  async function assign(row, assignee, words) {
    tell(row.key, "Publishing…");
    const answer = await writeOne({ key: row.key, act: "assign", assignee });
    if (answer.status !== 202) { tell(row.key, refusedWords(answer), true); drawnAs = null; refresh(); return; }
    tell(row.key, `${words}: assign ${answer.resolution.resolution_id} published as ${answer.resolution.decided_by}.`);
    drawnAs = null; // the name may be learnt now
    // A worker that does not own the key publishes what its owner may still refuse (a task
    // someone else holds): the row says so if the assignment does not show.
    settle((byKey) => !byKey.has(row.key) || (byKey.get(row.key).assignee || null) === (assignee || null),
      () => tell(row.key, `Not taken yet: assign ${answer.resolution.resolution_id} has not shown on the key; its owner may have refused it (see the dead-letter topic).`, true));
  }

  function reported(verb, outcomes) {
    // The bulk action's answer: a line of counts, and a row for each selected key.
    const count = (kind) => outcomes.filter((o) => o.result === kind).length;
    const first = { refused: 0, skipped: 1, accepted: 2 }; // what needs the steward's eye on top
    const listed = [...outcomes].sort((a, b) => first[a.result] - first[b.result] || (b.warn ? 1 : 0) - (a.warn ? 1 : 0));
    summary.textContent = `${verb}: ${count("accepted")} accepted · ${count("refused")} refused · ${count("skipped")} not sent`;
    summary.className = `status ${count("refused") ? "warn" : "muted"}`;
    report.replaceChildren(el("h2", {}, `${verb}: each row's answer`),
      el("table", { id: "bulk-results" },
        el("thead", {}, el("tr", {}, ["Key", "Statement", "Answer"].map((h) => el("th", {}, h)))),
        el("tbody", {}, listed.map((o) => el("tr", { "data-key": o.key, "data-result": o.result },
          el("td", {}, el("a", { href: keyHref(o.key) }, o.key)),
          el("td", { class: "muted id" }, o.what),
          el("td", { class: o.warn ? "warn" : o.result === "accepted" ? "accepted" : "muted" }, o.text))))));
    for (const o of outcomes) tell(o.key, o.text, o.warn);
  }

  async function bulk(verb, plan) {
    // `plan(key)`: the statement for the key, or why none is sent ({skip}); one batch for all.
    if (busy || !selected.size) return;
    busy = true;
    syncPicks();
    const keys = rows.map((r) => r.key).filter((key) => selected.has(key)); // in the queue's order
    summary.className = "status muted";
    summary.textContent = `${verb}: reading ${keys.length} keys…`;
    try {
      const plans = await eachAtMost(keys, READS_AT_ONCE, async (key) => {
        try { return { key, ...(await plan(key)) }; } catch (error) { return { key, skip: String(error) }; }
      });
      const sent = plans.filter((p) => p.statement);
      summary.textContent = `${verb}: publishing ${sent.length} statements…`;
      const answers = sent.length ? await writeMany(sent.map((p) => p.statement)) : [];
      sent.forEach((p, i) => { p.answer = answers[i]; });
      const outcomes = plans.map((p) => {
        const what = p.statement ? `${p.statement.act} ${p.statement.target_id || p.statement.assignee || ""}`.trim() : "—";
        if (!p.statement) return { key: p.key, result: "skipped", what, text: `Not sent: ${p.skip}`, warn: true };
        if (p.answer.status !== 202) return { key: p.key, result: "refused", what, text: refusedWords(p.answer), warn: true };
        const said = p.answer.resolution;
        const own = p.proposal && p.proposal.decided_by === said.decided_by && !p.authorCounts;
        return {
          key: p.key, result: "accepted", what, warn: own,
          text: own ? `Accepted as ${said.decided_by}, but ${said.decided_by} made ${p.proposal.resolution_id}: its author's own approval does not count, and the key's owner refuses it.`
            : `Accepted: ${said.act} ${said.resolution_id} published as ${said.decided_by}.`,
        };
      });
      for (const o of outcomes) if (o.result === "accepted") selected.delete(o.key);
      reported(verb, outcomes);
      drawnAs = null;
      const accepted = new Set(outcomes.filter((o) => o.result === "accepted").map((o) => o.key));
      const expected = new Map(plans.filter((p) => accepted.has(p.key)).map((p) => [p.key, p.statement]));
      settle((byKey) => [...expected].every(([key, s]) => !byKey.has(key) ||
        (s.act === "assign" ? byKey.get(key).assignee === s.assignee : !byKey.get(key).waiting_for_review)));
    } finally {
      busy = false;
      syncPicks();
    }
  }

  approveButton.addEventListener("click", () => bulk("Approve selected", proposalToApprove));
  takeButton.addEventListener("click", () => bulk("Take selected", async (key) => ({ statement: { key, act: "assign", assignee: state.me } })));

  const later = debounce(refresh, 800);
  const view = {
    key: null,
    refresh,
    onDecision(event) {
      changed.add(event.key);
      const row = shown.get(event.key);
      if (row && !OPEN.has(event.outcome)) {
        row.classList.add("closed", "fresh");
        row.querySelector(".outcome").replaceChildren(badge(event.outcome, event.conflict_kind));
      }
      later();
    },
    nodes: [
      el("h1", {}, "Open conflicts and quarantines"),
      el("div", { class: "filters" },
        el("label", {}, "Field", fieldSelect), el("label", {}, "Kind", kindSelect),
        el("label", {}, "Source", sourceSelect), el("label", {}, "Age", ageSelect),
        el("label", { class: "flag" }, el("span", {}, mineBox, " ", mineLabel)),
        el("label", { class: "flag" }, el("span", {}, unassignedBox, " Unassigned")),
        el("label", { class: "flag" }, el("span", {}, overdueBox, " Overdue")),
        filterNote),
      chips, workers,
      writable ? el("div", { class: "bulk", id: "bulk" }, selectedCount, approveButton, takeButton, summary) : null,
      el("table", { id: "queue" }, el("thead", {}, el("tr", {}, heads.map((h) => h instanceof Node ? h : el("th", {}, h)))), table),
      report,
    ].filter(Boolean),
  };
  // Assignments and proposals change no decision, so the live feed does not bring them: the
  // page looks again now and then while it is shown.
  const polling = setInterval(() => {
    if (state.view !== view) { clearInterval(polling); clearTimeout(timer); clearInterval(settling); }
    else if (document.visibilityState === "visible" && !busy) refresh();
  }, QUEUE_POLL_MS);
  return view;
}

// ---- a key ---------------------------------------------------------------------------------

function evidenceTable(evidence, id, records) {
  // `records` (source -> its row of /api/sources for the key's field): under each source, its
  // record on the field; and the spelling a claim was sent about, where an alias put it here.
  const sourceCell = (item) => el("td", {}, item.source,
    item.sent_about ? el("div", { class: "muted sent-about" }, `sent about ${item.sent_about}`) : null,
    records ? el("div", { class: "record" },
      el("a", { href: "#/sources", title: recordTitle(records.get(item.source)) }, record(records.get(item.source)))) : null);
  // Ten columns: in a box of its own that scrolls sideways where the page is narrower, never
  // under the panel beside it.
  return el("div", { class: "scroll" }, el("table", { id },
    el("thead", {}, el("tr", {}, ["Role", "Said", "Authority", "Source", "Replica", "Lineage", "Epoch", "Observed", "Valid from", "Valid to"].map((h) => el("th", {}, h)))),
    el("tbody", {}, evidence.map((item) => el("tr", { class: `role-${item.role}` },
      el("td", {}, item.role),
      el("td", { class: "value" }, said(item)),
      el("td", {}, item.authority),
      sourceCell(item),
      el("td", {}, item.replica || "—"),
      el("td", {}, item.lineage || "—"),
      el("td", {}, item.epoch ?? "—"),
      el("td", {}, instant(item.observed_at)),
      el("td", {}, instant(item.valid_from)),
      el("td", {}, instant(item.valid_to)))))));
}

function timeline(history, roles, cursor, pick) {
  const claims = history.claims;
  const decisions = history.decisions;
  const instants = [];
  for (const c of claims) {
    instants.push(Date.parse(c.observed_at));
    if (c.valid_from) instants.push(Date.parse(c.valid_from));
    if (c.valid_to) instants.push(Date.parse(c.valid_to));
  }
  for (const d of decisions) instants.push(Date.parse(d.decided_at));
  if (cursor) instants.push(cursor);
  let start = Math.min(...instants);
  let end = Math.max(...instants);
  if (!(end > start)) { start -= 60000; end += 60000; }
  const pad = (end - start) * 0.04;
  start -= pad; end += pad;
  const width = 1000, left = 180, right = 20, row = 22, top = 24;
  const height = top + (claims.length + 1) * row + 24;
  const x = (t) => left + ((t - start) / (end - start)) * (width - left - right);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, id: "timeline", role: "img" });
  root.append(svg("title", {}, "Claims (validity periods as bars, observations as dots) and emitted decisions; click to see the belief at that instant"));
  for (let i = 0; i <= 4; i++) {
    const t = start + ((end - start) * i) / 4;
    root.append(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: top - 6, y2: height - 18 }));
    const label = new Date(t).toISOString().replace(/\.\d+Z$/, "Z");
    const short = end - start < 86400000 ? label.slice(11) : label.slice(0, 10);
    root.append(svg("text", { class: "axis", x: x(t), y: height - 4, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" }, short));
  }
  claims.forEach((c, i) => {
    const y = top + i * row;
    const role = roles[c.claim_id] || "";
    const dim = DIM_ROLES.has(role) ? " dim" : "";
    const from = c.valid_from ? Date.parse(c.valid_from) : Date.parse(c.observed_at);
    const to = c.valid_to ? Date.parse(c.valid_to) : end;
    const words = c.status === "present" ? showValue(c.value, c.unit) : c.status;
    root.append(svg("text", { class: `label${dim}`, x: 4, y: y + 12 }, `${c.source} ${words}`.slice(0, 28)));
    root.append(svg("rect", { class: `bar${dim}`, x: x(from), y: y + 3, width: Math.max(2, x(to) - x(from)), height: 12, rx: 2 }));
    root.append(svg("circle", { class: "seen", cx: x(Date.parse(c.observed_at)), cy: y + 9, r: 3.5 }));
    if (c.epoch !== null && c.epoch !== undefined) {
      root.append(svg("text", { class: "epoch", x: x(Date.parse(c.observed_at)) + 6, y: y + 2 }, `epoch ${c.epoch}`));
    }
  });
  const dy = top + claims.length * row;
  root.append(svg("text", { class: "label", x: 4, y: dy + 12 }, "decisions"));
  for (const d of decisions) {
    const marker = svg("circle", { class: `decision ${d.outcome}`, cx: x(Date.parse(d.decided_at)), cy: dy + 8, r: 6 });
    marker.append(svg("title", {}, `${d.decided_at} ${d.outcome} ${d.reason}`));
    root.append(marker);
  }
  if (cursor) root.append(svg("line", { class: "cursor", x1: x(cursor), x2: x(cursor), y1: top - 8, y2: height - 18 }));
  root.addEventListener("click", (event) => {
    const box = root.getBoundingClientRect();
    const at = start + ((((event.clientX - box.left) / box.width) * width - left) / (width - left - right)) * (end - start);
    pick(new Date(Math.round(at / 1000) * 1000).toISOString().replace(".000Z", "Z"));
  });
  return el("div", { class: "timeline" }, root);
}

function rulesList(rules) {
  const rows = Object.entries(rules).filter(([, v]) => v !== null && !(typeof v === "object" && !Array.isArray(v) && !Object.keys(v).length));
  return el("dl", { class: "rules", id: "rules" }, rows.flatMap(([name, value]) => [
    el("dt", {}, name),
    el("dd", {}, name === "review" ? reviewRule(value) : ruleValue(value)),
  ]));
}

function ruleValue(value) {
  // A list (a field's values) reads as the policy file writes it; a map (the authorities: source
  // to level) as one line a source, its level beside it.
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value !== "object") return String(value);
  return el("ul", { class: "pairs" }, Object.entries(value).map(([name, level]) =>
    el("li", {}, el("span", {}, name), " ", el("span", { class: "muted" }, showValue(level)))));
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function reviewRule(review) {
  // The policy's `review:` in words: who must agree before a steward's word counts.
  const needs = review.approvals || 0;
  const rest = Object.entries(review).filter(([name]) => name !== "approvals" && name !== "author_may_approve");
  return el("div", { id: "review-rule" },
    needs ? `${plural(needs, "approval")} by other stewards before a resolution or undo counts (its author's own ${review.author_may_approve ? "counts too" : "does not count"})`
      : "none: a resolution or undo counts at once",
    rest.map(([name, value]) => el("div", {}, el("span", { class: "muted" }, name), " ", durationWords(value))));
}

function durationWords(value) {
  // An ISO 8601 duration (PT30M) as the policy file writes one (30m); anything else as it is.
  const parts = typeof value === "string" && value.match(/^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$/);
  if (!parts || value === "P" || value.endsWith("T")) return showValue(value);
  return [["d", parts[1]], ["h", parts[2]], ["m", parts[3]], ["s", parts[4]]]
    .filter(([, n]) => n !== undefined).map(([unit, n]) => `${n}${unit}`).join("") || "0s";
}

// ---- a key's stewards: proposals, reviews, undos ------------------------------------------
// GET /api/decisions/{key}/history gives the resolutions in force and the steward log (each
// statement with its standing); GET /api/decisions/{key} the basis an approval names.

const STANDING = {
  pending: "pending", in_force: "in force", applied: "applied", undone: "undone",
  rejected: "rejected", sent_back: "sent back", recorded: "",
};
const STEWARD_POLL_MS = 3000;
const REVIEW_ACTS = new Set(["approve", "reject", "send_back"]);
const PROPOSAL_ACTS = new Set(["resolve", "propose", "undo"]); // what reviews are of
const VALUED_ACTS = new Set(["resolve", "propose"]); // a resolution (`propose`: an agent's)
const ACT_WORDS = { approve: "approve", reject: "reject", send_back: "send back" };

function stewardStatements(history) {
  // Each statement the key holds, once: the resolutions in force, then the log.
  const all = history.resolutions.map((r) => ({ ...r, standing: "in_force", needs: 0, why: "" }));
  const seen = new Set(all.map((s) => s.resolution_id));
  for (const step of history.steward_log || []) {
    if (!seen.has(step.resolution_id)) { seen.add(step.resolution_id); all.push(step); }
  }
  return all;
}

function resolutionWords(s) {
  return s.status === "present" ? showValue(s.value, s.unit) : s.status;
}

function approvalsText(s, approvers) {
  if (!PROPOSAL_ACTS.has(s.act)) return "";
  const who = approvers.length ? ` (${approvers.join(", ")})` : "";
  if (s.needs) return `${approvers.length} of ${s.needs}${who}`;
  return approvers.length ? `approved by ${approvers.join(", ")}` : "—";
}

function stewardSection(ctx, statements) {
  if (!statements.length) return null;
  const byId = new Map(statements.map((s) => [s.resolution_id, s]));
  const reviewsOf = new Map();
  const top = [];
  for (const s of statements) {
    if (REVIEW_ACTS.has(s.act) && byId.has(s.target_id)) {
      if (!reviewsOf.has(s.target_id)) reviewsOf.set(s.target_id, []);
      reviewsOf.get(s.target_id).push(s);
    } else top.push(s);
  }
  const at = (s) => Date.parse(s.decided_at);
  top.sort((a, b) => at(b) - at(a)); // newest first, as the emitted decisions
  const rows = [];
  for (const s of top) {
    const reviews = (reviewsOf.get(s.resolution_id) || []).sort((a, b) => at(a) - at(b));
    rows.push(statementRow(ctx, s, byId, reviews.filter((r) => r.act === "approve").map((r) => r.decided_by)));
    for (const review of reviews) rows.push(statementRow(ctx, review, byId, []));
  }
  const heads = ["When", "Statement", "By", "Note", "Standing", "Approvals", ctx.writable ? "Your review" : null];
  return [
    el("h2", {}, "Stewards' history"),
    el("p", { class: "muted" }, "Resolutions and undos (proposals where the field's policy asks for review), each with the reviews of it: who, when, and the decision and evidence each approval saw."),
    el("div", { class: "scroll" }, el("table", { id: "steward-log" },
      el("thead", {}, el("tr", {}, heads.filter(Boolean).map((h) => el("th", {}, h)))),
      el("tbody", {}, rows))),
  ];
}

function statementRow(ctx, s, byId, approvers) {
  const review = REVIEW_ACTS.has(s.act) && byId.has(s.target_id);
  const basis = s.resolves_decision_id || s.basis_digest
    ? el("div", { class: "muted basis" }, s.act === "approve" ? "saw " : "on ",
      s.resolves_decision_id ? `decision ${s.resolves_decision_id}` : "", s.basis_digest ? ` · evidence ${s.basis_digest}` : "")
    : null;
  let what;
  if (VALUED_ACTS.has(s.act)) {
    const moved = s.standing === "pending" && s.resolves_decision_id && s.resolves_decision_id !== ctx.basis.decision_id;
    what = [`${s.act}: `, el("span", { class: "value" }, resolutionWords(s)),
      el("div", { class: "muted id" }, s.resolution_id), basis,
      moved ? el("div", { class: "warn moved" }, "the key has been decided again since it was proposed: an approval is refused (the key's owner sends it back to its author); look at the new evidence") : null];
  } else if (s.act === "undo") {
    const undone = byId.get(s.target_id);
    what = [`undo ${s.target_id}`, undone ? [": ", el("span", { class: "value" }, resolutionWords(undone)), ` by ${undone.decided_by}`] : null,
      el("div", { class: "muted id" }, s.resolution_id)];
  } else if (s.act === "assign") {
    what = s.assignee ? `takes the task for ${s.assignee}` : "releases the task";
  } else {
    what = [ACT_WORDS[s.act] || s.act, review ? null : ` ${s.target_id}`, basis];
  }
  const standing = STANDING[s.standing] ?? s.standing;
  return el("tr", { class: review ? "review" : null, "data-id": s.resolution_id, "data-act": s.act, "data-standing": s.standing },
    el("td", {}, instant(s.decided_at)),
    el("td", { class: "statement" }, what),
    el("td", { class: "by" }, s.decided_by),
    el("td", { class: "note" }, s.note || ""),
    el("td", { class: "standing" }, standing ? el("span", { class: `standing ${s.standing}` }, standing) : "",
      s.why ? el("div", { class: "why" }, s.why) : null),
    el("td", { class: "approvals" }, approvalsText(s, approvers)),
    ctx.writable ? el("td", { class: "actions" }, review ? null : stewardActions(ctx, s)) : null);
}

function stewardActions(ctx, s) {
  // What the steward may say of this statement: review a proposal; undo a resolution in force.
  const id = s.resolution_id;
  const reviewing = s.standing === "pending";
  const undoing = s.standing === "in_force" && VALUED_ACTS.has(s.act);
  const status = ctx.status(id);
  if (!reviewing && !undoing) return status.textContent ? status : null;
  const note = el("input", { type: "text", class: "review-note", "aria-label": `note on ${id}`,
    placeholder: reviewing ? "note (why reject or send back)" : "why undo", value: ctx.drafts.get(id) || "" });
  note.addEventListener("input", () => ctx.drafts.set(id, note.value));
  const act = (name, extra, refusal) => async () => {
    const said = await ctx.publish(id, { act: name, target_id: id, note: note.value, ...extra });
    if (!said) return;
    ctx.drafts.delete(id);
    const refused = refusal ? refusal(said) : null;
    if (refused) ctx.say(id, refused, true);
    else ctx.follow(said, id);
  };
  if (undoing) {
    return el("div", { class: "review-form" }, note,
      el("button", { type: "button", class: "undo", onclick: act("undo", { resolves_decision_id: ctx.current.decision_id }) },
        ctx.needs ? "Propose undo" : "Undo"),
      status);
  }
  // A worker that owns the key refuses an author's own approval at once (409); one that does
  // not publishes it, and the key's owner refuses it later (a dead letter): the page, which
  // learns who its token is from the answer, says so then.
  const ownApproval = (said) => said.decided_by === s.decided_by && !ctx.review.author_may_approve
    ? `Refused: ${said.decided_by} made ${id}, and its author's own approval does not count (review.author_may_approve is false): another steward must approve it. The key's owner refuses approval ${said.resolution_id}.`
    : null;
  // The basis this page loaded: the decision and evidence the steward approves as seen.
  const seen = { resolves_decision_id: ctx.basis.decision_id, basis_digest: ctx.basis.evidence_digest };
  return el("div", { class: "review-form" }, note,
    el("button", { type: "button", class: "approve", title: `as seen: decision ${seen.resolves_decision_id}, evidence ${seen.basis_digest}`, onclick: act("approve", seen, ownApproval) }, "Approve"),
    el("button", { type: "button", class: "reject", onclick: act("reject") }, "Reject"),
    el("button", { type: "button", class: "send-back", onclick: act("send_back") }, "Send back"),
    status);
}

function resolveForm(ctx) {
  if (!state.config.writes_enabled) return null;
  const { key, current } = ctx;
  const needs = ctx.needs;
  const options = new Map();
  for (const item of current.evidence) {
    if (item.status === "present") options.set(JSON.stringify(item.value), item.value);
  }
  const picked = ctx.drafts.get("resolve-choice");
  const first = picked && (options.has(picked) || picked === "not_found") ? picked : options.size ? options.keys().next().value : "not_found";
  const choices = [...options.entries()].map(([id, value]) => el("label", {},
    el("input", { type: "radio", name: "choice", value: id, checked: id === first }), " ", showValue(value, current.unit)));
  choices.push(el("label", {}, el("input", { type: "radio", name: "choice", value: "not_found", checked: first === "not_found" }), " not_found (it does not exist)"));
  const note = el("textarea", { id: "note", placeholder: "why (kept in the published record)" });
  note.value = ctx.drafts.get("resolve") || "";
  note.addEventListener("input", () => ctx.drafts.set("resolve", note.value));
  const form = el("form", { class: "resolve card", id: "resolve" },
    el("h2", {}, needs ? "Propose a resolution" : "Resolve"),
    needs ? el("p", { class: "review-needed", id: "review-needed" },
      `This field's policy asks for ${plural(needs, "approval")} by other stewards (review.approvals): what you publish is a proposal, kept pending and not applied until approved${ctx.review.author_may_approve ? "" : "; your own approval does not count"}.`) : null,
    el("fieldset", {}, el("legend", { class: "muted" }, "The value that holds"), choices),
    el("p", { class: "muted" }, "Published as the steward your token is bound to."),
    el("label", {}, "Note", note),
    state.token ? el("button", { type: "submit", id: "resolve-submit" }, needs ? "Propose resolution" : "Publish resolution")
      : el("p", { class: "muted" }, `Enter a steward token (top right) to ${needs ? "propose" : "resolve"}.`),
    ctx.status("resolve", "resolve-status"));
  form.addEventListener("change", () => {
    const chosen = form.querySelector("input[name=choice]:checked");
    if (chosen) ctx.drafts.set("resolve-choice", chosen.value);
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const chosen = form.querySelector("input[name=choice]:checked").value;
    const body = { resolves_decision_id: current.decision_id, note: note.value };
    if (chosen === "not_found") body.status = "not_found";
    else { body.status = "present"; body.value = options.get(chosen); }
    const said = await ctx.publish("resolve", body);
    if (!said) return;
    ctx.drafts.delete("resolve");
    ctx.drafts.delete("resolve-choice");
    ctx.follow(said, "resolve");
  });
  return form;
}

function watchWords(watch, statements) {
  // What became of a statement this page published, once the key's history tells; null: not yet.
  const mine = statements.find((s) => s.resolution_id === watch.id);
  const target = watch.target ? statements.find((s) => s.resolution_id === watch.target) : null;
  if (REVIEW_ACTS.has(watch.act)) {
    const now = target ? STANDING[target.standing] || target.standing : "no longer kept";
    if (mine) return { text: `${ACT_WORDS[watch.act]} ${watch.id} taken: ${watch.target} is ${now}.` };
    if (target && target.standing === "pending") return null;
    return { text: `Refused: ${watch.target} is ${now}${target && target.why ? `: ${target.why}` : ""}`, warn: true };
  }
  if (!mine) return null;
  const what = mine.act === "undo" ? "undo" : "resolution";
  if (mine.standing === "pending") return { text: `Proposed ${what} ${watch.id} as ${mine.decided_by}: pending, it waits for ${plural(mine.needs, "approval")}.` };
  return { text: `${what} ${watch.id} is ${STANDING[mine.standing] || mine.standing}.` };
}

function keyView(key, asOf) {
  const container = el("div", {});
  const field = key.slice(key.lastIndexOf("|") + 1);
  const records = sourceRecords().then((all) => new Map(
    [...all.values()].filter((row) => row.field === field).map((row) => [row.source, row])));
  let cursor = asOf; // an RFC 3339 instant, kept as given (decisions carry microseconds)
  let asked = 0; // refreshes asked for: an answer to an older one is dropped
  const notices = new Map(); // what the steward was told, by statement id (or "resolve")
  const drafts = new Map(); // notes being written, kept across the page's refreshes
  let statusNodes = new Map();
  let standings = new Map(); // each statement's standing, as the page last read the history
  let decided = null; // the key's decision id, as the page last read it
  let watching = null; // a statement this page published, until the key's history shows it
  let lastDrawn = null; // what the page last drew, to tell whether a poll brought anything new
  let fresh = false; // a live decision asked for the refresh still to be drawn

  function paint(node, notice) {
    node.textContent = notice ? notice.text : "";
    node.className = `status ${notice && notice.warn ? "warn" : "muted"}`;
  }

  function status(id, domId) {
    // What the steward was told lasts while what it was about stands as it did: the statement
    // (its standing), or before one was published, the key's decision.
    const notice = notices.get(id);
    if (notice && (notice.standing !== standings.get(notice.about) || (!notice.kept && notice.decision !== decided))) notices.delete(id);
    const node = el("p", { class: "status muted", id: domId, "data-for": id });
    paint(node, notices.get(id));
    statusNodes.set(id, node);
    return node;
  }

  function say(id, text, warn, about) {
    const on = about || (id === "resolve" ? null : id);
    notices.set(id, { text, warn: Boolean(warn), about: on, kept: Boolean(on), standing: standings.get(on), decision: decided });
    const node = statusNodes.get(id);
    if (node) paint(node, notices.get(id));
  }

  async function publish(notice, body) {
    say(notice, "Publishing…");
    const { ok, body: answer } = await api("/api/resolutions", {
      method: "POST",
      headers: { "Content-Type": "application/json", Authorization: `Bearer ${state.token}` },
      body: JSON.stringify({ key, ...body }),
    });
    if (!ok) { say(notice, `Refused: ${answer.error}`, true); return null; }
    const said = answer.resolution;
    learnName(said.decided_by);
    say(notice, `Published ${said.act} ${said.resolution_id} as ${said.decided_by}; waiting for the key's owner…`, false, notice === "resolve" ? said.resolution_id : null);
    return said;
  }

  function unwatch() {
    if (watching) clearInterval(watching.timer);
    watching = null;
  }

  function follow(said, notice) {
    // The live feed brings a new decision; polling covers a statement that changes none (a
    // proposal, a review) and a reconnect that missed one.
    unwatch();
    const watch = { id: said.resolution_id, act: said.act, target: said.target_id, notice, polls: 0 };
    watch.timer = setInterval(() => {
      if (watching !== watch) return;
      watch.polls += 1;
      if (watch.polls <= 30) { refresh(false, true); return; }
      unwatch();
      say(notice, `Not taken yet: ${watch.id} has not appeared on the key; its owner may have refused it (see the dead-letter topic).`, true);
    }, 1000);
    watching = watch;
  }

  async function belief(iso, panel) {
    panel.replaceChildren(el("p", { class: "muted" }, `Loading the belief at ${iso}…`));
    const { ok, status, body } = await api(`/api/decisions/${encodeURIComponent(key)}?as_of=${encodeURIComponent(iso)}`);
    if (status === ERASED) { panel.replaceChildren(erasedPanel(body, "asof-erased")); return; }
    if (!ok) { panel.replaceChildren(el("p", { class: "warn" }, body.error)); return; }
    panel.replaceChildren(el("div", {},
      el("h2", {}, `What we believed at ${iso}, and why`),
      el("p", {}, badge(body.belief.outcome, body.belief.conflict_kind), " ",
        el("span", { class: "value" }, showValue(body.belief.value)), ` · reason ${body.belief.reason} · decided at ${body.belief.decided_at}`),
      body.decision
        ? [el("pre", { class: "explain", id: "asof-explain" }, body.explain), evidenceTable(body.decision.evidence, "asof-evidence")]
        : el("p", { class: "muted" }, "The claims behind this decision are no longer retained for this key (max_claims_per_key); only the decision itself is.")));
  }

  async function refresh(live, quiet) {
    // `quiet` (a poll): draw only what changed, so a steward's typing is not disturbed for nothing.
    const mine = ++asked;
    if (live) fresh = true; // drawn by whichever refresh answers last
    const [now, history, known, spellings] = await Promise.all([
      api(`/api/decisions/${encodeURIComponent(key)}`),
      api(`/api/decisions/${encodeURIComponent(key)}/history`),
      records,
      api(`/api/aliases?subject=${encodeURIComponent(key.slice(0, key.lastIndexOf("|")))}`),
    ]);
    if (mine !== asked) return;
    const erased = [now, history].find((answer) => answer.status === ERASED);
    if (erased) {
      // Nothing of the key but its erasure: no value, no evidence, no timeline.
      lastDrawn = null;
      container.replaceChildren(el("h1", {}, key), erasedPanel(erased.body, "erased"));
      return;
    }
    if (!now.ok || !history.ok) {
      // Drawn in the view's own box, so a later refresh (the key's first decision) replaces it.
      lastDrawn = null;
      container.replaceChildren(el("h1", {}, key), el("p", { class: "warn" }, (now.ok ? history : now).body.error));
      return;
    }
    const current = now.body.decision;
    const statements = stewardStatements(history.body);
    standings = new Map(statements.map((s) => [s.resolution_id, s.standing]));
    const told = watching && watchWords(watching, statements);
    decided = current.decision_id;
    if (told) { say(watching.notice, told.text, told.warn, watching.notice === "resolve" ? watching.id : null); unwatch(); }
    const drawn = JSON.stringify([current.decision_id, current.outcome, now.body.basis, history.body.decisions.length,
      statements.map((s) => [s.resolution_id, s.standing, s.why]), Boolean(state.token)]);
    if (quiet && !fresh && drawn === lastDrawn) return;
    lastDrawn = drawn;
    const highlight = fresh;
    fresh = false;
    const focused = container.contains(document.activeElement) ? document.activeElement : null;
    const refocus = focused && (focused.id ? `#${CSS.escape(focused.id)}` : focused.getAttribute("aria-label") ? `[aria-label="${CSS.escape(focused.getAttribute("aria-label"))}"]` : null);
    statusNodes = new Map();
    const rules = now.body.rules;
    const review = rules.review || {};
    const ctx = {
      key, current, rules, review, basis: now.body.basis || {}, needs: review.approvals || 0,
      writable: Boolean(state.config.writes_enabled && state.token), drafts, status, say, publish, follow,
    };
    const roles = Object.fromEntries(current.evidence.map((e) => [e.claim_id, e.role]));
    const asofPanel = el("div", { class: "card", id: "asof" });
    const asofInput = el("input", { type: "text", id: "asof-input", placeholder: "2026-11-30T09:14:00Z", value: cursor || "" });
    const pick = (iso) => { cursor = iso; location.hash = `#/key/${encodeURIComponent(key)}@${encodeURIComponent(iso)}`; };
    const [subject, field] = [current.subject, current.field];
    container.replaceChildren(
      el("h1", {}, `${subject} · ${field}`),
      el("p", { id: "outcome", class: highlight ? "fresh" : null }, badge(current.outcome, current.conflict_kind), " ",
        OPEN.has(current.outcome) ? "" : [el("span", { class: "value", id: "value" }, current.status && current.status !== "present" ? current.status : showValue(current.value, current.unit)), " · "],
        `reason ${current.reason} · action ${current.action}`,
        current.resolution_id ? ` · resolution ${current.resolution_id}` : "",
        now.body.open_since ? ` · open since ${now.body.open_since}` : ""),
      el("div", { class: "grid2" },
        el("pre", { class: "explain", id: "explain" }, now.body.explain),
        el("div", {},
          OPEN.has(current.outcome) ? resolveForm(ctx) : null,
          el("div", { class: "card" }, el("h2", {}, `Policy for ${field}`), rulesList(rules)),
          el("p", { class: "muted" }, `Answered by ${now.body.worker}`))),
      el("div", {},
        stewardSection(ctx, statements),
        el("h2", {}, "Evidence"), evidenceTable(current.evidence, "evidence", known),
        el("h2", {}, "Timeline"),
        el("p", { class: "muted" }, "Bars: validity periods (open-ended ones run to the end); dots: when observed; grey: stale, superseded or excluded. Click to see the belief at that instant."),
        timeline(history.body, roles, cursor ? Date.parse(cursor) : null, pick),
        el("div", { class: "asof-controls" }, el("label", { for: "asof-input" }, "Belief as of"), asofInput,
          el("button", { type: "button", id: "asof-go", onclick: () => { if (!Number.isNaN(Date.parse(asofInput.value))) pick(asofInput.value.trim()); } }, "Show")),
        asofPanel,
        el("h2", {}, "Emitted decisions"),
        el("table", { id: "decisions" },
          el("thead", {}, el("tr", {}, ["Decided at", "Outcome", "Value", "Reason", "Decision id"].map((h) => el("th", {}, h)))),
          el("tbody", {}, [...history.body.decisions].reverse().map((d) => el("tr", {},
            el("td", {}, el("a", { href: "#", "data-at": d.decided_at, onclick: (e) => { e.preventDefault(); pick(d.decided_at); } }, instant(d.decided_at))),
            el("td", {}, badge(d.outcome, d.conflict_kind)),
            el("td", { class: "value" }, showValue(d.value)),
            el("td", {}, d.reason),
            el("td", { class: "muted" }, d.decision_id))))),
        spellings.ok && spellings.body.changes.length ? [
          el("h2", {}, "Merges and splits"),
          el("p", { class: "muted" }, "The alias changes that moved evidence into or out of this key."),
          el("table", { id: "merges" }, el("tbody", {}, spellings.body.changes.map((c) => el("tr", {},
            el("td", {}, instant(c.at)), el("td", {}, c.alias),
            el("td", {}, c.canonical === null ? retraction(c) : `→ ${c.canonical}`), el("td", {}, c.by || "—")))))] : null),
    );
    if (refocus) {
      const again = container.querySelector(refocus);
      if (again) {
        again.focus();
        if (again.tagName === "TEXTAREA" || again.type === "text") again.setSelectionRange(again.value.length, again.value.length);
      }
    }
    if (cursor) belief(cursor, asofPanel);
    else asofPanel.replaceChildren(el("p", { class: "muted" }, "Pick an instant on the timeline or a decision to see what was believed then."));
  }

  render(container);
  const view = {
    key,
    refresh,
    onDecision(event) { if (event.key === key) refresh(true); },
    nodes: [container],
  };
  // Proposals and reviews change no decision, so the live feed does not bring them: the page
  // asks for the key's history now and then while it is shown.
  const polling = setInterval(() => {
    if (state.view !== view) clearInterval(polling);
    else if (document.visibilityState === "visible" && !watching) refresh(false, true);
  }, STEWARD_POLL_MS);
  return view;
}


// ---- the sources ---------------------------------------------------------------------------
// How often each source matched what settled conflicts settled on (GET /api/sources), and each
// source's record for the key page's evidence.

const SOURCE_COLUMNS = [
  ["source", "Source"], ["field", "Field"], ["authority", "Authority"], ["settled", "Settled"],
  ["agreed", "Agreed"], ["disagreed", "Disagreed"], ["share", "Agreed share"],
  ["last_settled", "Last settled"], [null, "Latest disagreements"],
];
const SINCE = [["", "all kept days"], ["1", "today"], ["7", "7 days"], ["30", "30 days"]];

function sinceQuery(days) {
  if (!days) return "";
  const start = new Date(Date.now() - (Number(days) - 1) * 86400000);
  return `?since=${encodeURIComponent(start.toISOString().slice(0, 10) + "T00:00:00Z")}`;
}

function share(value) {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(1)} %`;
}

function record(row) {
  // One source's record on one field, in words: what the key page shows per evidence row.
  if (!row) return "none settled";
  return `${row.agreed}/${row.settled} agreed`;
}

function recordTitle(row) {
  return row ? `${share(row.share)} of ${row.settled} settled claims agreed; last settled ${row.last_settled}` : "no conflict with this source's claims on this field was settled yet";
}

// Rows by "source|field", for the key page's evidence table; fetched once per key page.
async function sourceRecords() {
  const { ok, body } = await api("/api/sources");
  const records = new Map();
  if (ok) for (const row of body.rows) records.set(`${row.source}|${row.field}`, row);
  return records;
}

function sourcesView(params) {
  const query = new URLSearchParams(params);
  let sortKey = query.get("sort") || "disagreed";
  let descending = query.get("order") !== "asc";
  const days = query.get("days") || "";
  const table = el("tbody");
  const head = el("tr");
  const workers = el("p", { class: "muted", id: "source-workers" });
  const findings = el("div", { id: "source-findings" });
  let rows = [];
  const sinceSelect = el("select", { name: "days" }, SINCE.map(([v, label]) => el("option", { value: v }, label)));
  sinceSelect.value = days;
  sinceSelect.addEventListener("change", () => { location.hash = `#/sources?days=${sinceSelect.value}`; });

  function draw() {
    head.replaceChildren(...SOURCE_COLUMNS.map(([key, label]) => el("th", {},
      key ? el("a", { href: "#", "data-sort": key, onclick: (event) => {
        event.preventDefault();
        descending = sortKey === key ? !descending : true;
        sortKey = key;
        draw();
      } }, label + (key === sortKey ? (descending ? " ▾" : " ▴") : "")) : label)));
    const sorted = [...rows].sort((a, b) => {
      const x = a[sortKey] ?? "", y = b[sortKey] ?? "";
      const order = x < y ? -1 : x > y ? 1 : `${a.source}|${a.field}` < `${b.source}|${b.field}` ? -1 : 1;
      return descending ? -order : order;
    });
    table.replaceChildren(...sorted.map((row) => el("tr", { "data-source": row.source, "data-field": row.field },
      el("td", {}, row.source),
      el("td", {}, row.field),
      el("td", {}, row.authority || "—"),
      el("td", { class: "settled" }, row.settled),
      el("td", { class: "agreed" }, row.agreed),
      el("td", { class: "disagreed" }, row.disagreed),
      el("td", {}, share(row.share)),
      el("td", {}, instant(row.last_settled)),
      el("td", { class: "latest" }, row.latest_disagreements.map((d) =>
        el("div", {}, el("a", { href: keyHref(d.key), title: d.decision_id }, d.key)))))));
    if (!rows.length) table.replaceChildren(el("tr", {}, el("td", { colspan: SOURCE_COLUMNS.length, class: "muted" }, "No settled conflicts yet.")));
  }

  function finding(title, evidence, keys) {
    return el("li", {}, title, el("div", { class: "muted" }, evidence),
      keys.length ? el("div", {}, keys.map((key) => [el("a", { href: keyHref(key) }, key), " "])) : null);
  }

  async function refresh() {
    const { ok, body } = await api(`/api/sources${sinceQuery(days)}`);
    if (!ok) { workers.replaceChildren(el("span", { class: "warn" }, body.error)); return; }
    workers.replaceChildren(`${body.workers.length} workers answered`,
      body.unanswered.length ? el("span", { class: "warn" }, ` · did not answer: ${body.unanswered.join(", ")}`) : "");
    rows = body.rows;
    draw();
    findings.replaceChildren(
      el("h2", {}, "Candidate shared lineages"),
      body.lineages.length ? el("ul", { id: "lineages" }, body.lineages.map((f) => finding(
        `${f.first} and ${f.second} on ${f.field}`,
        `the same statement ${f.same} of ${f.together} times (independent: at most ${f.expected_same}); both wrong the same way ${f.same_wrong} times; p=${f.p_value}`,
        f.example_keys))) : el("p", { class: "muted" }, "None."),
      el("h2", {}, "Authorities to review"),
      body.authority_reviews.length ? el("ul", { id: "reviews" }, body.authority_reviews.map((f) => finding(
        `${f.weaker} (${f.weaker_authority}) over ${f.stronger} (${f.stronger_authority}) on ${f.field}`,
        `where they differed: ${f.weaker} right ${f.weaker_only_agreed} times, ${f.stronger} ${f.stronger_only_agreed}; p=${f.p_value}`,
        f.example_keys))) : el("p", { class: "muted" }, "None."),
      el("p", { class: "muted" }, "Suggestions only: nothing here changes a decision. `claimstream policy suggest` prints them as policy edits."));
  }

  return {
    key: null,
    refresh,
    onDecision() {},
    nodes: [
      el("h1", {}, "Sources: who settled conflicts proved right"),
      el("p", { class: "muted" }, "Each claim of a conflict or quarantine that a steward's resolution, or a later deciding observation, closed: did it say the settled value?"),
      el("div", { class: "filters" }, el("label", {}, "Settled in", sinceSelect)),
      workers,
      el("table", { id: "sources" }, el("thead", {}, head), table),
      findings,
    ],
  };
}

// ---- erasures -------------------------------------------------------------------------------
// The erasures stewards approved and the requests waiting for approvals (GET /api/erasures);
// with a token, a request (subject and reason) and approvals (POST /api/erasures). A statement
// takes effect the policy's lead time after it is made; the worker reads it from its topic.

const ERASURES_POLL_MS = 3000;

function erasuresView(params) {
  const subject = new URLSearchParams(params).get("subject") || "";
  const writable = canWrite();
  const waiting = el("tbody");
  const approved = el("tbody");
  const said = el("p", { class: "status muted", id: "erasure-status" });
  const filter = el("input", { type: "text", id: "erasure-subject-filter", placeholder: "any subject", value: subject });
  const subjectInput = el("input", { type: "text", id: "erase-subject", required: true, autocomplete: "off" });
  const reasonInput = el("textarea", { id: "erase-reason", required: true, maxlength: 2000 });

  function tell(text, warn) {
    said.textContent = text;
    said.className = `status ${warn ? "warn" : "muted"}`;
  }

  async function send(body) {
    let answer;
    try {
      answer = await api("/api/erasures", { method: "POST", headers: bearer(), body: JSON.stringify(body) });
    } catch (error) {
      return { ok: false, body: { error: String(error) } };
    }
    if (answer.ok) learnName(answer.body.by);
    return answer;
  }

  async function request(event) {
    event.preventDefault();
    tell("Publishing…");
    const { ok, body } = await send({ subject: subjectInput.value.trim(), reason: reasonInput.value.trim() });
    if (!ok) { tell(`Refused: ${body.error}`, true); return; }
    subjectInput.value = "";
    reasonInput.value = "";
    tell(`Requested erasure ${body.erasure_id} as ${body.by}: it takes effect at ${body.at}, or once approved after that.`);
    refresh();
  }

  async function approve(pending) {
    tell(`Approving ${pending.erasure_id}…`);
    const { ok, body } = await send({ approve: pending.erasure_id });
    if (!ok) { tell(`Refused: ${body.error}`, true); return; }
    tell(`Approved erasure ${body.erasure_id} as ${body.by} (counts from ${body.at}).`);
    refresh();
  }

  function waitingRow(p) {
    const mine = p.approvals.includes(state.me);
    return el("tr", { "data-erasure": p.erasure_id },
      el("td", { class: "id" }, p.erasure_id), el("td", {}, p.subject), el("td", {}, instant(p.requested_at)),
      el("td", {}, p.by), el("td", { class: "note" }, p.reason),
      el("td", {}, `${p.approvals.length} of ${p.needs}`, p.approvals.length ? el("div", { class: "muted" }, p.approvals.join(", ")) : null),
      writable ? el("td", {}, el("button", { type: "button", class: "approve-erasure", disabled: mine,
        title: mine ? "you approved it already" : null, onclick: () => approve(p) }, "Approve")) : null);
  }

  function approvedRow(e) {
    return el("tr", { "data-erasure": e.erasure_id },
      el("td", { class: "id" }, e.erasure_id), el("td", {}, e.subject),
      el("td", {}, instant(e.at), " ", el("span", { class: `badge ${e.in_effect ? "erased" : "waiting"}` }, e.in_effect ? "in effect" : "scheduled")),
      el("td", {}, instant(e.requested_at)), el("td", {}, e.by), el("td", { class: "note" }, e.reason),
      el("td", {}, e.approvals.join(", ") || "—"), el("td", { class: "muted" }, e.spellings.join(", ")));
  }

  async function refresh() {
    const { ok, body } = await api(`/api/erasures${subject ? `?subject=${encodeURIComponent(subject)}` : ""}`);
    if (!ok) { tell(body.error, true); return; }
    const none = (columns, text) => el("tr", {}, el("td", { colspan: columns, class: "muted" }, text));
    waiting.replaceChildren(...(body.waiting.length ? body.waiting.map(waitingRow) : [none(7, "None.")]));
    approved.replaceChildren(...(body.erasures.length ? body.erasures.map(approvedRow) : [none(8, "None.")]));
  }

  const heads = (names) => el("thead", {}, el("tr", {}, names.filter(Boolean).map((h) => el("th", {}, h))));
  const view = {
    key: null,
    refresh,
    onDecision() {},
    nodes: [
      el("h1", {}, "Erasures"),
      el("p", { class: "muted" }, "A data subject's erasure: from its instant on, nothing of the subject's data from before it is kept or shown, under any of its spellings. It takes effect once the stewards the policy asks for approve it; it cannot be undone."),
      el("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); location.hash = `#/erasures${filter.value.trim() ? `?subject=${encodeURIComponent(filter.value.trim())}` : ""}`; } },
        el("label", { for: "erasure-subject-filter" }, "Subject", filter), el("button", { type: "submit" }, "Show")),
      writable ? el("form", { class: "card resolve", id: "erase-form", onsubmit: request },
        el("h2", {}, "Request an erasure"),
        el("label", { for: "erase-subject" }, "Subject"), subjectInput,
        el("label", { for: "erase-reason" }, "Reason (the data-protection request it answers)"), reasonInput,
        el("button", { type: "submit", id: "erase-request" }, "Request erasure")) : null,
      said,
      el("h2", {}, "Waiting for approvals"),
      el("table", { id: "erasures-waiting" }, heads(["Request", "Subject", "Requested at", "By", "Reason", "Approvals", writable ? "Approve" : null]), waiting),
      el("h2", {}, "Approved"),
      el("table", { id: "erasures-approved" }, heads(["Request", "Subject", "Erased at", "Requested at", "By", "Reason", "Approved by", "Spellings covered"]), approved),
    ],
  };
  // A statement reaches the list once the worker has read it from the erasures topic.
  const polling = setInterval(() => {
    if (state.view !== view) clearInterval(polling);
    else if (document.visibilityState === "visible") refresh();
  }, ERASURES_POLL_MS);
  return view;
}

// ---- routing and the steward token ---------------------------------------------------------

function route() {
  const hash = location.hash || "#/";
  let view;
  if (hash.startsWith("#/sources")) {
    view = sourcesView(hash.includes("?") ? hash.slice(hash.indexOf("?") + 1) : "");
  } else if (hash.startsWith("#/erasures")) {
    view = erasuresView(hash.includes("?") ? hash.slice(hash.indexOf("?") + 1) : "");
  } else if (hash.startsWith("#/key/")) {
    const [rawKey, rawAt] = hash.slice("#/key/".length).split("@");
    view = keyView(decodeURIComponent(rawKey), rawAt ? decodeURIComponent(rawAt) : null);
  } else {
    view = queueView(hash.includes("?") ? hash.slice(hash.indexOf("?") + 1) : "");
  }
  const followKey = state.view && state.view.key;
  state.view = view;
  render(...view.nodes);
  if (!source || followKey !== view.key) follow(view.key);
  view.refresh();
}

function stewardPanel() {
  const form = document.getElementById("steward");
  const input = document.getElementById("token");
  const forget = document.getElementById("token-forget");
  form.hidden = !state.config.writes_enabled;
  const shown = () => {
    input.hidden = Boolean(state.token);
    document.getElementById("token-use").hidden = Boolean(state.token);
    forget.hidden = !state.token;
  };
  // A new token may be another steward's: the page asks whose, and draws the view again (the
  // queue offers its task actions and bulk selection only with a token).
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    state.token = input.value.trim();
    input.value = "";
    if (state.token) sessionStorage.setItem("claimstream.steward", state.token);
    shown();
    await whoAmI();
    route();
  });
  forget.addEventListener("click", () => {
    state.token = "";
    state.me = "";
    sessionStorage.removeItem("claimstream.steward");
    showName();
    shown();
    route();
  });
  shown();
}

async function start() {
  const { ok, body } = await api("/api/console");
  if (!ok) { render(el("p", { class: "warn" }, body.error)); return; }
  state.config = body;
  document.getElementById("worker").textContent = `${body.worker} · policy ${body.policy_version}`;
  await whoAmI();
  stewardPanel();
  window.addEventListener("hashchange", route);
  route();
}

document.addEventListener("DOMContentLoaded", start);
