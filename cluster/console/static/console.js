// Cairn's console: polls the node's JSON endpoints (the shapes the CLI's
// --json prints) every 2 s and draws the page the address's hash names.
// Every value goes into the page as text, never as HTML.
"use strict";

const page = document.getElementById("page");
const every = 2000;
// Each queue's counters at the last polls, for its rate graph.
const samples = {};
let timer = null;

async function get(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function post(path) {
  const r = await fetch(path, { method: "POST", headers: { "X-Cairn-Console": "1" } });
  const body = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "data") Object.assign(e.dataset, v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

// table draws rows of cells; a cell is a value, a Node, or
// {v, field, n} (a number is right-aligned; field names it for tests).
function table(headers, rows) {
  const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
  const body = rows.map((cells) => el("tr", {}, ...cells.map((c) => {
    if (c !== null && typeof c === "object" && !(c instanceof Node)) {
      return el("td", { class: typeof c.v === "number" ? "n" : "", data: c.field ? { field: c.field } : {} }, c.v);
    }
    return el("td", { class: typeof c === "number" ? "n" : "" }, c);
  })));
  return el("table", {}, head, ...body);
}

function plural(n, word) { return `${n} ${word}${n === 1 ? "" : "s"}`; }

function link(hash, text) { return el("a", { href: hash }, text); }

function confirmed(what, path, then) {
  return async () => {
    if (!confirm(what + "?")) return;
    try {
      await post(path);
      then && then();
      refresh();
    } catch (e) { showError(e); }
  };
}

function showError(e) {
  const box = document.getElementById("error");
  box.hidden = !e;
  box.textContent = e ? String(e.message || e) : "";
}

async function cluster() {
  const st = await get("/api/cluster");
  return [
    el("h2", {}, "Nodes"),
    table(["Node", "State", "Meta role", "Client address", "HTTP"], st.nodes.map((n) => [
      n.id, el("span", { class: "state-" + n.state, data: { node: n.id, field: "state" } }, n.state), n.meta_role, n.client_addr, n.http_addr])),
    el("p", {}, `Answered by ${st.answered_by}; ${plural(st.under_replicated, "member")} under-replicated, ${st.moving} moving.`),
    el("h2", {}, "Raft groups"),
    table(["Group", "Leader", "Commit index", "Replicas (lag in entries)"], st.groups.map((g) => [
      g.name, g.leader ? el("span", { class: "state-leader" }, g.leader) : el("span", { class: "state-dead" }, "none"), g.commit_index,
      g.replicas.map((r) => `${r.node}${r.reachable ? "" : " (unreachable)"}: ${r.lag}${r.catching_up ? ", catching up" : ""}`).join("; ")])),
  ];
}

async function destinations() {
  const [queues, topics] = await Promise.all([get("/api/queues"), get("/api/topics")]);
  const out = [el("h2", {}, "Queues"),
    table(["Queue", "Members", "Pending", "Delivered", "Delayed", "Dead-lettered", "Consumers"], queues.map((q) => [
      link("#/queue/" + encodeURIComponent(q.name), q.name), q.members.length, { v: q.pending, field: "pending" }, { v: q.delivered, field: "delivered" },
      q.delayed, q.dead_lettered, q.consumers]))];
  out.push(el("h2", {}, "Topics"));
  for (const t of topics) {
    out.push(el("h3", {}, link("#/topic/" + encodeURIComponent(t.name), t.name), ` (${plural(t.members.length, "member")})`),
      table(["Subscription", "Client id", "Durable", "Shared", "Pending", "Delivered", "Consumers"], t.subscriptions.map((s) => [
        s.name || s.destination, s.client_id, s.durable ? "yes" : "no", s.shared ? "yes" : "no", s.pending, s.delivered, s.consumers])));
  }
  return out;
}

async function queue(name) {
  const path = "/api/queues/" + encodeURIComponent(name);
  const [q, msgs] = await Promise.all([get(path), get(path + "/messages")]);
  const seen = (samples[name] = samples[name] || []);
  seen.push({ at: Date.now(), sent: q.counters.sent, acked: q.counters.acknowledged });
  if (seen.length > 61) seen.shift();
  return [
    el("h2", {}, "Queue ", el("span", { data: { field: "name" } }, q.name)),
    el("p", {}, "Pending ", el("span", { data: { field: "pending" } }, q.pending), ", delivered ", el("span", { data: { field: "delivered" } }, q.delivered),
      `, delayed ${q.delayed}, dead-lettered ${q.dead_lettered}, prepared ${q.prepared}; ${plural(q.replicas, "replica")} a member.`),
    el("button", { class: "danger", onclick: confirmed(`Purge queue ${q.name}: delete its ${q.pending} pending messages`, "/api/queues/" + encodeURIComponent(q.name) + "/purge") }, "Purge…"),
    el("h2", {}, "Members"),
    table(["Member", "Host", "Replicas", "Pending", "Delivered", "Delayed", "Moving", "Dead-lettered", "Consumers"], q.members.map((m) => [
      m.name, m.host || el("span", { class: "state-dead" }, "none"), m.replicas.join(", "), { v: m.pending, field: "pending-" + m.name },
      { v: m.delivered, field: "delivered-" + m.name }, m.delayed, m.moving, m.dead_lettered, m.consumers])),
    el("h2", {}, "Messages per second over the last two minutes: ",
      el("span", { class: "in" }, "sent"), " and ", el("span", { class: "out" }, "acknowledged")),
    graph(seen),
    el("h2", {}, "Pending messages (the first 100)"),
    table(["Message", "Member", "Deliveries", "Priority", "Body", ""], msgs.map((m) => [
      m.id, m.member, m.delivery_count, m.priority, m.body.length > 80 ? m.body.slice(0, 80) + "…" : m.body,
      el("button", { onclick: moveTo(q.name, m.id) }, "Move to…")])),
  ];
}

// moveTo asks where message id of queue from goes (for a dead-letter
// queue NAME.DLQ, NAME by default) and moves it there.
function moveTo(from, id) {
  return async () => {
    const to = prompt(`Move message ${id} of ${from} to which queue? It is sent there anew and taken from ${from}, both or neither.`, from.replace(/\.DLQ$/, ""));
    if (!to) return;
    try {
      await post("/api/queues/" + encodeURIComponent(from) + "/messages/" + encodeURIComponent(id) + "/move?to=" + encodeURIComponent(to));
      refresh();
    } catch (e) { showError(e); }
  };
}

// graph draws the rates between successive samples: sent and
// acknowledged messages per second (a counter that fell, as when a queue
// is made again under its name, starts over).
async function topic(name) {
  const t = await get("/api/topics/" + encodeURIComponent(name));
  const out = [el("h2", {}, "Topic ", el("span", { data: { field: "name" } }, t.name)),
    el("p", {}, `${plural(t.members.length, "member")}, ${plural(t.replicas, "replica")} a member, ${plural(t.subscriptions.length, "subscription")}.`)];
  for (const s of t.subscriptions) {
    out.push(el("h3", {}, "Subscription ", s.name || s.destination, s.client_id ? ` of ${s.client_id}` : "",
      ` (${s.durable ? "durable" : "non-durable"}${s.shared ? ", shared" : ""}${s.selector ? ", selector " + s.selector : ""})`),
    table(["Member", "Host", "Pending", "Delivered", "Delayed", "Dead-lettered", "Consumers"], s.members.map((m) => [
      m.name, m.host || el("span", { class: "state-dead" }, "none"), m.pending, m.delivered, m.delayed, m.dead_lettered, m.consumers])));
  }
  return out;
}

function graph(seen) {
  const rate = (k) => seen.slice(1).map((s, i) => Math.max(0, (s[k] - seen[i][k]) / Math.max(0.001, (s.at - seen[i].at) / 1000)));
  const lines = [[rate("sent"), "#3367d6"], [rate("acked"), "#1c7c3a"]];
  const c = el("canvas", { width: 480, height: 100 });
  const g = c.getContext("2d");
  const top = Math.max(1, ...lines.flatMap(([v]) => v));
  for (const [values, color] of lines) {
    g.strokeStyle = color;
    g.beginPath();
    values.forEach((v, i) => {
      const x = (i / 59) * (c.width - 2) + 1, y = c.height - 1 - (v / top) * (c.height - 2);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  }
  g.fillStyle = "#6b7385";
  g.fillText(top.toFixed(top < 10 ? 1 : 0) + "/s", 4, 12);
  return c;
}

async function connections() {
  const r = await get("/api/connections");
  const out = [el("h2", {}, "Connections"),
    table(["Connection", "Node", "Client id", "Remote", "Sessions", "Consumers", "Connected", ""], r.connections.map((c) => [
      c.id, c.node, c.client_id, c.remote_addr, c.sessions, c.consumers, c.connected_at,
      el("button", { class: "danger", onclick: confirmed(`Destroy connection ${c.id} of ${c.client_id || c.remote_addr}: its client is told and does not reconnect`, "/api/connections/" + encodeURIComponent(c.id) + "/destroy") }, "Destroy…")]))];
  if (r.unreachable.length) out.push(el("p", { class: "error" }, "Not answering: " + r.unreachable.join(", ")));
  return out;
}

function route() {
  const h = location.hash.replace(/^#\/?/, "");
  if (h.startsWith("queue/")) return () => queue(decodeURIComponent(h.slice(6)));
  if (h.startsWith("topic/")) return () => topic(decodeURIComponent(h.slice(6)));
  return { destinations, connections }[h] || cluster;
}

async function refresh() {
  clearTimeout(timer);
  try {
    const parts = await route()();
    page.replaceChildren(...parts);
    page.dataset.state = "ready";
    document.getElementById("updated").textContent = new Date().toLocaleTimeString();
    showError(null);
  } catch (e) {
    showError(e);
  }
  timer = setTimeout(refresh, every);
}

window.addEventListener("hashchange", refresh);
get("/api/console").then((c) => {
  document.getElementById("node").textContent = "node " + c.node;
  document.getElementById("open").hidden = c.secured || c.open_to_network;
  document.getElementById("open-network").hidden = !c.open_to_network;
}).catch(showError);
refresh();
