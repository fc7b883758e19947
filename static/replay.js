// The example client's replay page: steps through a recording one entry at a time (the create
// request, each event, each reply, the result), rebuilding the output as it was at that step.
(function () {
  const section = document.getElementById('replay');
  if (!section) return;
  const step = document.getElementById('replay-step');
  const stdout = document.getElementById('replay-stdout');
  const stderr = document.getElementById('replay-stderr');
  const position = document.getElementById('replay-position');
  let steps = [];
  let at = 0;

  function show() {
    const current = steps[at];
    position.textContent = `${at + 1} / ${steps.length}: ${current.title}`;
    section.dataset.step = at + 1;
    step.textContent = JSON.stringify(current.value, null, 2);
    const out = { stdout: '', stderr: '' };
    for (const s of steps.slice(0, at + 1)) {
      if (s.kind === 'event' && (s.value.event === 'stdout' || s.value.event === 'stderr')) {
        out[s.value.event] += s.value.data.chunk;
      }
    }
    stdout.textContent = out.stdout;
    stderr.textContent = out.stderr;
  }

  fetch(`${location.origin}${section.dataset.recording}`)
    .then((response) => response.json())
    .then((recording) => {
      steps = [{ kind: 'create', title: 'create', value: recording.create }];
      for (const entry of recording.log) {
        const title = entry.kind === 'event' ? `event: ${entry.value.event}` : entry.kind;
        steps.push({ kind: entry.kind, title, value: entry.value });
      }
      show();
    });
  document.getElementById('replay-next').addEventListener('click', () => {
    if (at + 1 < steps.length) { at += 1; show(); }
  });
  document.getElementById('replay-prev').addEventListener('click', () => {
    if (at > 0) { at -= 1; show(); }
  });
})();
