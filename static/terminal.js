// The engine terminal on /ui/engines: starts a session for an engine, shows it with xterm.js
// over the service's WebSocket (binary frames: output; text frames: input and size changes),
// reattaches to a live session when the page loads, and stops it. One session at a time.
(function () {
  const panel = document.getElementById('terminal-panel');
  if (!panel) return;
  const screen = document.getElementById('terminal');
  const status = document.getElementById('terminal-status');
  const message = document.getElementById('terminal-message');
  let term = null;
  let fit = null;
  let socket = null;

  const send = (data) => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(data));
  };

  function show(session) {
    panel.hidden = false;
    message.textContent = '';
    status.textContent = `${session.engine}: ${session.live ? 'live' : 'ended'}`;
    if (!term) {
      term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 2000 });
      fit = new FitAddon.FitAddon();
      term.loadAddon(fit);
      term.open(screen);
      term.onData((data) => send({ type: 'input', data }));
      term.onResize(({ cols, rows }) => send({ type: 'resize', cols, rows }));
      window.addEventListener('resize', () => fit.fit());
    } else {
      term.reset();
    }
    fit.fit();
    // Brought into view: the user opened it (and xterm.js draws nothing while off screen).
    panel.scrollIntoView({ block: 'nearest' });
  }

  function connect() {
    if (socket) socket.close();
    const scheme = location.protocol === 'https:' ? 'wss' : 'ws';
    socket = new WebSocket(`${scheme}://${location.host}/ui/engines/tui/session/ws`);
    socket.binaryType = 'arraybuffer';
    socket.onopen = () => {
      send({ type: 'resize', cols: term.cols, rows: term.rows });
      term.focus();
    };
    socket.onmessage = (event) => {
      if (typeof event.data !== 'string') {
        term.write(new Uint8Array(event.data));
        return;
      }
      const note = JSON.parse(event.data);
      if (note.type === 'exit') status.textContent += ` — exited (${note.code ?? 'signal'})`;
    };
  }

  document.addEventListener('click', async (event) => {
    const button = event.target.closest('[data-terminal-engine]');
    if (!button) return;
    const response = await fetch(`${location.origin}/ui/engines/tui/session/start`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ engine: button.dataset.terminalEngine }),
    });
    const body = await response.json();
    if (!response.ok) {
      // Said beside the button that was pressed, where the eye is.
      const beside = document.getElementById(`engine-message-${button.dataset.terminalEngine}`) || message;
      beside.textContent = typeof body.detail === 'string' ? body.detail : JSON.stringify(body.detail);
      return;
    }
    show(body);
    connect();
  });

  document.getElementById('terminal-stop').addEventListener('click', () => {
    fetch(`${location.origin}/ui/engines/tui/session/stop`, { method: 'POST' });
  });

  fetch(`${location.origin}/ui/engines/tui/session`)
    .then((response) => response.json())
    .then((state) => {
      if (state.session && state.session.live) {
        show(state.session);
        connect();
      }
    });
})();
