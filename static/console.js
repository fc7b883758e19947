// The run page's live output: follows the run's event stream (stdout and stderr each in its own
// pane, by byte offset, so a reconnect neither loses nor repeats a chunk), tells the page when
// the run changed, and follows the stream again once a reply has resumed the run.
(function () {
  const section = document.getElementById('live-output');
  if (!section) return;
  const panes = { stdout: document.getElementById('stdout'), stderr: document.getElementById('stderr') };
  const offsets = { stdout: 0, stderr: 0 };
  let source = null;
  const changed = () => document.body.dispatchEvent(new CustomEvent('run-changed'));

  function open() {
    if (source) return;
    // Absolute: a page opened with credentials in its URL cannot build requests from relative ones.
    const url = `${location.origin}${section.dataset.events}?stdout_from=${offsets.stdout}&stderr_from=${offsets.stderr}`;
    source = new EventSource(url);
    for (const name of ['stdout', 'stderr']) {
      source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        if (data.from !== offsets[name]) return;
        const pane = panes[name];
        const follow = pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
        pane.append(data.chunk);
        offsets[name] = data.to;
        if (follow) pane.scrollTop = pane.scrollHeight;
      });
    }
    source.addEventListener('status', changed);
    source.addEventListener('end', () => {
      source.close();
      source = null;
      changed();
    });
  }

  document.body.addEventListener('run-resumed', () => { changed(); open(); });
  open();
})();
