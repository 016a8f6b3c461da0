// The stoker dashboard: one snapshot from /v1/dashboard, redrawn with plotly.js whenever
// /v1/events/stream says something happened, and every few seconds for the measured rates.
"use strict";

// Okabe-Ito, then a few more distinct hues: readable, and safe for colour-blind readers.
const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
  "#F0E442", "#000000", "#7F3C8D", "#11A579", "#3969AC", "#F2B701", "#E73F74", "#80BA5A"];
const MARKS = {
  arrival: { symbol: "triangle-up", label: "arrival" },
  pause: { symbol: "square-open", label: "pause" },
  resume: { symbol: "circle", label: "resume" },
  finish: { symbol: "star", label: "finish" },
  failure: { symbol: "x", label: "failure" },
  cancel: { symbol: "x-thin-open", label: "cancel" },
};
const EVENT_KINDS = ["state", "plan", "replan", "share", "resumed", "submitted", "restored",
  "restart", "gate", "hello", "stale", "tpm_fit", "stopped"];
const FINAL = new Set(["completed", "failed", "cancelled"]);
const CONFIG = { displaylogo: false, responsive: true };
const POLL_MS = 3000;

const LOG_LINES = 60;

let snapshot = null;
let stream = null;
let pending = null;
let picked = null; // the job whose metrics and log are shown: clicked, or the newest running
let pickedStream = null; // stdout or stderr; null: stderr for a failed job, else stdout

function colour(jobs, id) {
  const index = jobs.findIndex((job) => job.id === id);
  return PALETTE[(index < 0 ? 0 : index) % PALETTE.length];
}

function query() {
  return document.getElementById("find").value.trim().toLowerCase();
}

function matches(job) {
  const wanted = query();
  return wanted === "" || job.name.toLowerCase().includes(wanted);
}

function layout(extra) {
  return Object.assign({
    margin: { l: 48, r: 12, t: 8, b: 36 },
    paper_bgcolor: "#ffffff",
    plot_bgcolor: "#ffffff",
    font: { family: "system-ui, sans-serif", size: 12, color: "#1d2430" },
    legend: { orientation: "h", y: -0.2 },
    hovermode: "closest",
  }, extra);
}

// Step functions of every job on one time axis, stacked: each job is a band whose height is
// its value (workers per GPU, or decoder share) while it runs.
function stacked(jobs, timeline, field, now) {
  const times = new Set([now]);
  for (const job of jobs) {
    for (const step of (timeline[job.id] || { steps: [] }).steps) times.add(step[0]);
  }
  const axis = [...times].sort((a, b) => a - b);
  const below = axis.map(() => 0);
  const bands = [];
  for (const job of jobs) {
    const steps = (timeline[job.id] || { steps: [] }).steps;
    let at = 0;
    let value = 0;
    const top = axis.map((t, i) => {
      while (at < steps.length && steps[at][0] <= t) { value = steps[at][field]; at += 1; }
      return below[i] + value;
    });
    bands.push({ job, bottom: below.slice(), top });
    top.forEach((v, i) => { below[i] = v; });
  }
  return { axis, bands };
}

function bandTraces(jobs, timeline, field, now, unit) {
  const { axis, bands } = stacked(jobs, timeline, field, now);
  const x = axis.map((t) => new Date(t * 1000));
  const traces = bands.map(({ job, bottom, top }, index) => ({
    type: "scatter",
    mode: "lines",
    name: job.label,
    x,
    y: top,
    customdata: top.map((v, i) => v - bottom[i]),
    hovertemplate: `${job.label}: %{customdata:.3~f} ${unit}<extra></extra>`,
    line: { shape: "hv", width: 1, color: colour(jobs, job.id) },
    fill: index === 0 ? "tozeroy" : "tonexty",
    fillcolor: colour(jobs, job.id) + "99",
    opacity: matches(job) ? 1 : 0.15,
  }));
  return { traces, axis, bands };
}

function markTraces(jobs, timeline, axis, bands) {
  const byKind = {};
  for (const { job, top } of bands) {
    for (const [t, kind] of (timeline[job.id] || { marks: [] }).marks) {
      let i = axis.findIndex((s) => s > t) - 1;
      if (i < 0) i = axis.length - 1;
      const height = kind === "pause" || kind === "finish" || kind === "failure" || kind === "cancel"
        ? top[Math.max(0, i - 1)] : top[i];
      (byKind[kind] = byKind[kind] || []).push({ t, height, job });
    }
  }
  return Object.entries(byKind).map(([kind, points]) => ({
    type: "scatter",
    mode: "markers",
    name: MARKS[kind] ? MARKS[kind].label : kind,
    x: points.map((p) => new Date(p.t * 1000)),
    y: points.map((p) => p.height),
    text: points.map((p) => `${p.job.label}: ${kind}`),
    hovertemplate: "%{text}<br>%{x}<extra></extra>",
    marker: {
      symbol: MARKS[kind] ? MARKS[kind].symbol : "diamond",
      size: 10,
      color: points.map((p) => colour(jobs, p.job.id)),
      line: { width: 1.5, color: "#1d2430" },
      opacity: points.map((p) => (matches(p.job) ? 1 : 0.2)),
    },
  }));
}

function drawTimelines(data, now) {
  const jobs = data.jobs;
  const workers = bandTraces(jobs, data.timeline, 1, now, "workers per GPU");
  const marks = markTraces(jobs, data.timeline, workers.axis, workers.bands);
  Plotly.react("workers", [...workers.traces, ...marks], layout({
    xaxis: { type: "date" },
    yaxis: { title: { text: "workers per GPU" }, rangemode: "tozero" },
    legend: { orientation: "h", y: -0.15 },
  }), CONFIG);
  const section = document.getElementById("shares").parentElement;
  section.hidden = !(data.node.decoder_capacity > 0);
  if (section.hidden) return; // no decoder on this node: nothing to share
  const shares = bandTraces(jobs, data.timeline, 2, now, "of the decoder");
  Plotly.react("shares", shares.traces, layout({
    xaxis: { type: "date" },
    yaxis: { title: { text: "share" }, range: [0, 1.05] },
    showlegend: false,
  }), CONFIG);
}

function drawThroughput(data) {
  const running = data.jobs.filter((job) => !FINAL.has(job.state) && job.predicted_samples_per_s != null);
  const names = running.map((job) => job.label);
  Plotly.react("throughput", [
    { type: "bar", name: "predicted", x: names, y: running.map((j) => j.predicted_samples_per_s),
      marker: { color: "#56B4E9" }, hovertemplate: "%{x}: %{y:.0f} samples/s predicted<extra></extra>" },
    { type: "bar", name: "measured", x: names, y: running.map((j) => j.measured_samples_per_s),
      marker: { color: "#0072B2" }, hovertemplate: "%{x}: %{y:.0f} samples/s measured<extra></extra>" },
  ], layout({ barmode: "group", yaxis: { title: { text: "samples/s" }, rangemode: "tozero" } }), CONFIG);
}

// Who holds a GPU: running jobs, else an ended job whose processes still run on it.
function plural(n, word) {
  return `${n} ${word}${n > 1 ? "s" : ""}`;
}

function gpuHolders(g) {
  const parts = [];
  if (g.jobs) parts.push(plural(g.jobs, "job"));
  if (g.exiting) parts.push(`kept by ${plural(g.exiting, "ended job")} until ${g.exiting > 1 ? "their" : "its"} processes exit`);
  return parts.length ? parts.join(", ") : "no job";
}

function drawIdle(data) {
  Plotly.react("idle", [{
    type: "bar",
    x: data.gpus.map((g) => g.name),
    y: data.gpus.map((g) => g.idle_fraction),
    text: data.gpus.map(gpuHolders),
    hovertemplate: "%{x}: %{y:.0%} idle (%{text})<extra></extra>",
    marker: { color: data.gpus.map((g) => (g.jobs ? "#E69F00" : g.exiting ? "#CC79A7" : "#c5ccd6")) },
  }], layout({ yaxis: { tickformat: ".0%", range: [0, 1] } }), CONFIG);
}

function drawFit(data) {
  const tpm = data.tpm;
  const byId = Object.fromEntries(data.jobs.map((job) => [job.id, job]));
  const points = tpm.jobs.filter((p) => byId[p.job]);
  const most = Math.max(1, ...points.map((p) => Math.max(p.predicted, p.measured))) * 1.1;
  Plotly.react("fit", [
    { type: "scatter", mode: "lines", name: "measured = predicted", x: [0, most], y: [0, most],
      line: { dash: "dot", color: "#8a93a3" }, hoverinfo: "skip" },
    { type: "scatter", mode: "markers", name: "running jobs",
      x: points.map((p) => p.predicted), y: points.map((p) => p.measured),
      text: points.map((p) => byId[p.job].label),
      marker: { size: 11, color: points.map((p) => colour(data.jobs, p.job)),
        opacity: points.map((p) => (matches(byId[p.job]) ? 1 : 0.2)) },
      hovertemplate: "%{text}: predicted %{x:.0f}, measured %{y:.0f} samples/s<extra></extra>" },
  ], layout({
    xaxis: { title: { text: "predicted samples/s" }, range: [0, most] },
    yaxis: { title: { text: "measured samples/s" }, range: [0, most] },
    showlegend: false,
  }), CONFIG);
  const parts = [`model: ${tpm.source}`];
  if (tpm.training_r2 != null) parts.push(`training fit ${tpm.training_candidate}, held-out R² ${tpm.training_r2.toFixed(3)}`);
  if (tpm.loading_r2 != null) parts.push(`loading fit R² ${tpm.loading_r2.toFixed(3)}`);
  if (tpm.refused) parts.push(`a refit was refused: ${tpm.refused.reason}`);
  parts.push(tpm.live_r2 == null
    ? "live R²: needs two running jobs whose throughput differs"
    : `live R² over ${points.length} running jobs ${tpm.live_r2.toFixed(2)}`);
  document.getElementById("fit-note").textContent = parts.join(" · ");
}

function drawUse(data) {
  const node = data.node;
  const rows = [["loader processes", node.loader_processes_allocated, node.cpu_workers]];
  if (node.decoder_capacity > 0) rows.push(["decoder share", node.decoder_share_allocated, 1]);
  const slots = node.gpus || node.cpu_training_slots;
  const busy = data.gpus.filter((g) => g.jobs > 0).length;
  rows.push([node.gpus ? "GPUs with a job" : "CPU slots with a job", busy, slots]);
  Plotly.react("use", [{
    type: "bar",
    orientation: "h",
    y: rows.map((r) => r[0]),
    x: rows.map((r) => (r[2] ? r[1] / r[2] : 0)),
    text: rows.map((r) => `${+r[1].toFixed(2)} of ${r[2]}`),
    textposition: "auto",
    hovertemplate: "%{y}: %{text}<extra></extra>",
    marker: { color: "#009E73" },
  }], layout({ xaxis: { tickformat: ".0%", range: [0, 1.05] }, margin: { l: 150, r: 12, t: 8, b: 36 } }), CONFIG);
}

function chip(text) {
  const span = document.createElement("span");
  span.className = "chip";
  span.textContent = text;
  return span;
}

function drawHeader(data) {
  const node = data.node;
  const chips = [
    `policy ${node.policy}`,
    node.gpus ? `${node.gpus} GPUs` : `${node.cpu_training_slots} CPU slots`,
    `${node.loader_processes_allocated} / ${node.cpu_workers} loader processes`,
    `${node.jobs_running} running`,
    `${node.jobs_waiting_for_gpus} waiting`,
  ];
  if (node.decoder_capacity > 0) chips.push(`decoder ${node.decoder_capacity} samples/s`);
  if (data.tenant !== "admin") chips.push(`tenant ${data.tenant}`);
  document.getElementById("node").replaceChildren(...chips.map(chip));
}

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function number(value) {
  return value == null ? "" : Math.round(value).toLocaleString();
}

function signedPercent(value) {  // measured against predicted: +12 % is faster than predicted
  if (value == null) return "";
  const rounded = Math.round(100 * value);
  return rounded === 0 ? "0 %" : `${rounded > 0 ? "+" : "-"}${Math.abs(rounded)} %`;
}

function span(seconds) {  // as `stoker show` says it
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function progress(job) {
  const done = job.iterations == null ? String(job.iteration) : `${job.iteration} / ${job.iterations}`;
  return job.seconds_left == null ? done : `${done}, ${span(job.seconds_left)} left`;
}

function drawJobs(data) {
  const wanted = query();
  const rows = data.jobs.map((job) => {
    const tr = document.createElement("tr");
    tr.dataset.job = job.name;
    const name = cell(job.label);
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour(data.jobs, job.id);
    name.prepend(swatch);
    const decoder = job.decode_mode === "device" ? `device, ${(100 * job.decoder_share).toFixed(0)} %` : (job.decode_mode || "");
    const state = (job.exiting ? `${job.state} (exiting)` : job.state)  // its processes run on
      + (job.phase ? `, ${job.phase}` : "") + (job.stalled ? ", STALLED" : "");
    tr.append(name, cell(state, `state-${job.state}`), cell(job.model ?? "command"), cell(String(job.gpus)),
      cell(job.workers_per_gpu == null ? "" : String(job.workers_per_gpu)), cell(decoder),
      cell(number(job.predicted_samples_per_s)), cell(number(job.measured_samples_per_s)),
      cell(signedPercent(job.prediction_error)),
      cell(progress(job)));
    if (!matches(job)) tr.className = "hidden";
    else if (wanted) tr.className = "found";
    if (job.id === picked) tr.classList.add("picked");
    tr.addEventListener("click", () => { picked = job.id; pickedStream = null; draw(); });
    return tr;
  });
  document.querySelector("#jobs tbody").replaceChildren(...rows);
  document.querySelector("#jobs-older").textContent = data.older_jobs
    ? `and ${plural(data.older_jobs, "older ended job")}, not drawn: \`stoker jobs\` lists every one`
    : "";
}

function describe(event, names) {
  const data = event.data || {};
  const name = names[event.job_id] || event.job_id || "node";
  if (event.kind === "state") return `${name}: ${data.from || ""} → ${data.to}${data.why ? ` (${data.why})` : ""}`;
  if (event.kind === "share") return `${name}: decoder share ${(100 * data.share).toFixed(0)} %, live`;
  if (event.kind === "resumed") return `${name}: resumed with ${data.workers} workers per GPU after ${(+data.gap_s).toFixed(1)} s`;
  if (event.kind === "plan") return `plan ${data.gen}`;
  return `${name}: ${event.kind}`;
}

function drawEvents(data) {
  const names = Object.fromEntries(data.jobs.map((job) => [job.id, job.label]));
  const items = data.events.slice(-60).reverse().map((event) => {
    const li = document.createElement("li");
    const time = document.createElement("time");
    time.textContent = new Date(event.at * 1000).toLocaleTimeString();
    li.append(time, document.createTextNode(describe(event, names)));
    const job = data.jobs.find((j) => j.id === event.job_id);
    if (job && !matches(job)) li.hidden = true;
    return li;
  });
  document.getElementById("events").replaceChildren(...items);
}

function pick(data) {
  if (picked && data.jobs.some((job) => job.id === picked)) return picked;
  const running = data.jobs.filter((job) => !FINAL.has(job.state));
  const newest = (running.length ? running : data.jobs).slice(-1)[0];
  return newest ? newest.id : null;
}

async function drawJob(data) {
  const id = pick(data);
  const job = data.jobs.find((j) => j.id === id);
  document.getElementById("job-name").textContent = job ? job.label : "(none yet)";
  if (!job) return;
  const streamName = pickedStream || (job.state === "failed" ? "stderr" : "stdout");
  document.getElementById("job-stream").value = streamName;
  const base = `/v1/jobs/${encodeURIComponent(id)}`;
  const [metrics, log] = await Promise.all([
    fetch(`${base}/metrics?points=500`, { credentials: "same-origin", cache: "no-store" }),
    fetch(`${base}/logs?stream=${streamName}&tail=${LOG_LINES}`, { credentials: "same-origin", cache: "no-store" }),
  ]);
  if (id !== pick(data)) return; // another job was picked meanwhile
  const reported = metrics.ok ? await metrics.json() : { series: {} };
  const names = Object.keys(reported.series).sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b)));
  Plotly.react("job-metrics", names.map((name, index) => ({
    type: "scatter",
    mode: "lines",
    name,
    x: reported.series[name].map((point) => point[0]),
    y: reported.series[name].map((point) => point[1]),
    visible: index === 0 ? true : "legendonly", // one scale at a time; click the legend for more
    line: { width: 1.5, color: PALETTE[index % PALETTE.length] },
    hovertemplate: `${name} %{y:.4~g} at step %{x}<extra></extra>`,
  })), layout({
    xaxis: { title: { text: "step" }, rangemode: "tozero" },
    yaxis: { title: { text: names[0] || "" } },
    showlegend: names.length > 1,
  }), CONFIG);
  document.getElementById("job-note").textContent = names.length
    ? `newest: ${names.map((name) => `${name} ${reported.newest[name] == null ? "not finite" : (+reported.newest[name]).toPrecision(4)}`).join(", ")}`
    : "nothing reported yet: a script reports with job.report(loss=loss)";
  const box = document.getElementById("job-log");
  const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  box.textContent = log.ok ? (await log.text()) || `(no ${streamName} yet)` : `(the log is not available: ${log.status})`;
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function draw() {
  if (!snapshot) return;
  const now = Date.now() / 1000;
  drawHeader(snapshot);
  drawTimelines(snapshot, now);
  drawThroughput(snapshot);
  drawIdle(snapshot);
  drawFit(snapshot);
  drawUse(snapshot);
  picked = pick(snapshot);
  drawJobs(snapshot);
  drawEvents(snapshot);
  drawJob(snapshot).catch(offline);
}

async function refresh() {
  pending = null;
  const reply = await fetch("/v1/dashboard", { credentials: "same-origin", cache: "no-store" });
  if (reply.status === 401) {
    window.location.reload(); // the server shows how to sign in
    return;
  }
  if (!reply.ok) return;
  snapshot = await reply.json();
  draw();
  if (!stream) listen(snapshot.last_event);
}

function soon() {
  if (pending === null) pending = setTimeout(() => { refresh().catch(offline); }, 250);
}

function offline() {
  const live = document.getElementById("live");
  live.textContent = "daemon unreachable";
  live.className = "live off";
}

function listen(after) {
  stream = new EventSource(`/v1/events/stream?after=${after}`);
  const live = document.getElementById("live");
  stream.onopen = () => { live.textContent = "live"; live.className = "live on"; };
  stream.onerror = () => { live.textContent = "reconnecting"; live.className = "live off"; };
  stream.onmessage = soon;
  for (const kind of EVENT_KINDS) stream.addEventListener(kind, soon);
}

document.getElementById("find").addEventListener("input", draw);
document.getElementById("job-stream").addEventListener("change", (event) => {
  pickedStream = event.target.value;
  draw();
});
// The page carries the node as it was served: drawn at once, before any request (a headless
// browser's screenshot, a slow link), then kept live by the event stream.
const served = document.getElementById("snapshot");
if (served) {
  snapshot = JSON.parse(served.textContent);
  draw();
  document.getElementById("live").textContent = `as of ${new Date().toLocaleTimeString()}`;
  listen(snapshot.last_event);
} else {
  refresh().catch(offline);
}
setInterval(() => { refresh().catch(offline); }, POLL_MS);
