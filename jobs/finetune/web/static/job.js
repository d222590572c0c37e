// The job page's live part: the loss curve and the log grow from server-sent events.
(() => {
  const box = document.getElementById("loss-chart");
  const initial = JSON.parse(box.dataset.initial);
  const steps = [], losses = [];
  let chart = null;

  function add(points) {
    for (const [step, loss] of points) {
      const at = steps.findIndex((s) => s >= step);
      if (at === -1) { steps.push(step); losses.push(loss); }
      else if (steps[at] === step) { losses[at] = loss; }
      else { steps.splice(at, 0, step); losses.splice(at, 0, loss); }
    }
    box.dataset.points = String(steps.length);
    if (chart) chart.setData([steps, losses]);
  }

  if (window.uPlot) {
    chart = new uPlot({
      width: Math.max(320, box.clientWidth || 800), height: 300,
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: "loss" }],
      series: [{ label: "step" }, { label: "loss", stroke: "#b3261e", width: 2, spanGaps: true }],
    }, [[], []], box);
  } else {
    document.getElementById("chart-missing").hidden = false;
  }
  add(initial.points);
  if (box.dataset.final === "true") return;

  const log = document.getElementById("job-log");
  const text = (id, value) => { document.getElementById(id).textContent = value; };
  const last = initial.points.length ? initial.points[initial.points.length - 1][0] : -1;
  const url = `/ui/jobs/${box.dataset.job}/events?after_step=${last}&after_log=${initial.last_log}`;
  const events = new EventSource(url);
  events.addEventListener("update", (event) => {
    const u = JSON.parse(event.data);
    add(u.points);
    for (const l of u.logs) log.textContent += `${l.ts.slice(11, 19)} ${l.source}: ${l.line}\n`;
    if (u.logs.length) log.scrollTop = log.scrollHeight;
    text("job-state", u.state);
    document.getElementById("job-state").className = `state ${u.state}`;
    if (u.step !== null) text("job-step", u.step);
    if (u.total) text("job-total", u.total);
    if (u.loss !== null) text("job-loss", u.loss.toFixed(4));
    if (u.cancel_requested && !u.final) text("cancel-note", " · cancel requested");
    if (u.final) {
      events.close();
      box.dataset.final = "true";
      const form = document.getElementById("cancel-job");
      if (form) form.remove();
    }
  });
})();
