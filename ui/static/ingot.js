// Ingot UI: confirmations, diff view toggles and live run progress. No framework, no build step.
// A run page polls /api/runs/ID each second while the run goes: its log and newest step stream
// in; when it ends the page reloads to show the verdict the run reported.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
    return;
  }
  // One press, one request: a double click must not send the decision twice.
  setTimeout(() => form.querySelectorAll("button[type=submit]").forEach((b) => (b.disabled = true)), 0);
});

document.querySelectorAll("section.diffs").forEach((section) => {
  const show = (view) => {
    section.querySelectorAll("pre.unified").forEach((el) => (el.hidden = view !== "unified"));
    section.querySelectorAll("table.split").forEach((el) => (el.hidden = view !== "split"));
    section.querySelectorAll("button.tab").forEach((b) => b.classList.toggle("active", b.dataset.view === view));
  };
  section.querySelectorAll("button.tab").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
  show("unified");
});

const run = document.querySelector("[data-testid=run]");
if (run && ["running", "stopping"].includes(run.dataset.status)) {
  const status = run.querySelector("[data-testid=run-status]");
  const bar = run.querySelector("[data-testid=run-progress]");
  const label = run.querySelector("[data-testid=run-progress-label]");
  const log = run.querySelector("[data-testid=run-log]");
  const poll = async () => {
    let data;
    try {
      const response = await fetch(`/api/runs/${run.dataset.run}`, { headers: { Accept: "application/json" } });
      data = await response.json();
    } catch (err) {
      setTimeout(poll, 3000);
      return;
    }
    const shown = data.status === "succeeded" ? "finished" : data.status;
    status.textContent = shown;
    status.className = `chip ${shown}`;
    run.dataset.status = data.status;
    if (data.progress) {
      // The newest step the run reported ("step 3 of 5: held-out A/B 6/24 judgements").
      bar.value = data.progress.percent;
      label.textContent = data.progress.label;
    }
    const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent = data.log;
    if (atBottom) log.scrollTop = log.scrollHeight;
    if (["running", "stopping"].includes(data.status)) setTimeout(poll, 1000);
    else window.location.reload();
  };
  setTimeout(poll, 1000);
}

// A supervised change's countdown to the end of its review window (the server rendered it once).
document.querySelectorAll("[data-testid=countdown]").forEach((el) => {
  const deadline = Date.parse(el.dataset.deadline);
  const tick = () => {
    const left = Math.round((deadline - Date.now()) / 1000);
    if (left <= 0) {
      el.textContent = "goes live any moment now";
      return;
    }
    const h = Math.floor(left / 3600);
    const m = Math.floor((left % 3600) / 60);
    const parts = (h ? [`${h} h`] : []).concat(h || m ? [`${m} min`] : []).concat([`${left % 60} s`]);
    el.textContent = `goes live in ${parts.join(" ")}`;
    setTimeout(tick, 1000);
  };
  tick();
});
