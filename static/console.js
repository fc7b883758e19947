// Every page: a form with `data-confirm` asks before it is sent (revoking a key); a button with
// `data-copy` copies the text of the element it names (a key shown once).
(function () {
  document.addEventListener('submit', (event) => {
    const question = event.target.dataset && event.target.dataset.confirm;
    if (question && !window.confirm(question)) event.preventDefault();
  }, true);
  document.addEventListener('click', (event) => {
    const button = event.target.closest && event.target.closest('button[data-copy]');
    if (!button) return;
    const source = document.getElementById(button.dataset.copy);
    if (!source) return;
    const text = source.textContent;
    const done = () => { button.dataset.copied = 'true'; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => {});
    } else {
      const range = document.createRange();
      range.selectNodeContents(source);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      document.execCommand('copy');
      done();
    }
  });
})();

// The run page's live views: the conversation (`/chat`, items by seq) as the main view when the
// page has one, stderr in its own pane and stdout (`/events`, by byte offset). A reconnect neither
// loses nor repeats anything; the page is told when the run changed, and both streams follow the
// run again once a reply has resumed it.
(function () {
  const section = document.getElementById('live-output');
  if (!section) return;
  const panes = { stdout: document.getElementById('stdout'), stderr: document.getElementById('stderr') };
  // The console's run page has a conversation; the example client's shows the output only.
  const chat = document.getElementById('conversation');
  const labels = chat ? chat.dataset : {};
  const offsets = { stdout: 0, stderr: 0 };
  let cursor = 0;
  let source = null;
  let chatSource = null;
  const changed = () => document.body.dispatchEvent(new CustomEvent('run-changed'));
  // Absolute: a page opened with credentials in its URL cannot build requests from relative ones.
  const url = (path) => `${location.origin}${path}`;

  function following(pane) {
    return pane.scrollTop + pane.clientHeight >= pane.scrollHeight - 4;
  }

  // Chunks are shown a few at a time: measuring a pane for every chunk costs as much as its
  // whole text, so a chatty run would leave the page ever further behind.
  const pending = { stdout: [], stderr: [] };
  let flushing = 0;
  function flush() {
    flushing = 0;
    for (const name of ['stdout', 'stderr']) {
      if (!pending[name].length) continue;
      const pane = panes[name];
      // Errors show once there are some: an empty pane says nothing.
      if (pane.parentElement.hidden) pane.parentElement.hidden = false;
      const follow = following(pane);
      pane.append(pending[name].join(''));
      pending[name] = [];
      if (follow) pane.scrollTop = pane.scrollHeight;
    }
  }

  function open() {
    if (source) return;
    source = new EventSource(url(`${section.dataset.events}?stdout_from=${offsets.stdout}&stderr_from=${offsets.stderr}`));
    for (const name of ['stdout', 'stderr']) {
      source.addEventListener(name, (event) => {
        const data = JSON.parse(event.data);
        if (data.from !== offsets[name]) return;
        pending[name].push(data.chunk);
        offsets[name] = data.to;
        if (!flushing) flushing = setTimeout(flush, 50);
      });
    }
    source.addEventListener('status', changed);
    source.addEventListener('end', (event) => {
      source.close();
      source = null;
      clearTimeout(flushing);
      flush();
      changed();
      if (JSON.parse(event.data).reason === 'waiting_user') showQuestion(10);
    });
    source.addEventListener('error', () => retry(source, () => { source = null; open(); }));
  }

  // The question section reloads on `run-changed`; a change that came while it was loading for
  // an earlier one is missed, so a run that waits but shows no question is asked about again.
  function showQuestion(tries) {
    setTimeout(() => {
      if (document.querySelector('#question .question') || tries <= 0) return;
      changed();
      showQuestion(tries - 1);
    }, 700);
  }

  // A browser reconnects a dropped stream by itself (with Last-Event-ID), but gives up on an
  // answer that is not a stream (the service restarting, a proxy's 502): start over from the
  // offsets received, a little later.
  function retry(stream, again) {
    if (stream.readyState !== EventSource.CLOSED) return;
    setTimeout(again, 1000);
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // What a model says is Markdown: rendered with any HTML in it shown as text (as it was
  // said), then sanitised by DOMPurify all the same (no scripts, handlers, styles, forms,
  // frames or images; links open apart from the page). Plain text where the libraries are not
  // loaded. Made on first use: the libraries load after this file.
  let sanitize;
  let markdownParser;
  const escapeHtml = (text) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;')
    .replace(/>/g, '&gt;').replace(/"/g, '&quot;');
  function sanitizer() {
    if (sanitize === undefined) {
      sanitize = window.DOMPurify && window.marked ? window.DOMPurify(window) : null;
      if (sanitize) {
        markdownParser = new window.marked.Marked({
          gfm: true,
          async: false,
          renderer: { html: (token) => escapeHtml(token.text) },
        });
        sanitize.addHook('afterSanitizeAttributes', (node) => {
          if (node.tagName === 'A') {
            node.setAttribute('rel', 'noopener noreferrer');
            node.setAttribute('target', '_blank');
          }
        });
      }
    }
    return sanitize;
  }
  function markdown(text) {
    const box = element('div', 'markdown');
    if (!sanitizer()) {
      box.textContent = text;
      return box;
    }
    const html = markdownParser.parse(text || '');
    box.innerHTML = sanitize.sanitize(html, {
      USE_PROFILES: { html: true },
      FORBID_TAGS: ['style', 'form', 'input', 'button', 'textarea', 'select', 'img', 'svg', 'math', 'iframe'],
      FORBID_ATTR: ['style'],
    });
    return box;
  }

  // A script's lines are messages one by one; shown as one block of output, not a bubble each.
  // Each line is an element of its own in the block: appending one lays out only it, where one
  // growing text would be laid out whole for every line (a chatty script stalled the page).
  const script = section.dataset.engine === 'script';

  // One conversation item as a list entry; text only, never markup from the run. `null` when
  // the item went into the entry before it.
  function render(item) {
    if (script && item.kind === 'assistant_message') {
      const last = chat.lastElementChild;
      if (last && last.classList.contains('script-output')) {
        last.append(element('div', 'line', item.text));
        return null;
      }
      const block = element('li', `role-${item.role} kind-${item.kind} script-output`);
      block.append(element('div', 'line', item.text));
      block.dataset.seq = item.seq;
      block.dataset.kind = item.kind;
      return block;
    }
    const li = element('li', `role-${item.role} kind-${item.kind}`);
    li.dataset.seq = item.seq;
    li.dataset.kind = item.kind;
    const correlation = item.correlation || {};
    const details = correlation.details || {};
    const label = (text) => li.append(element('span', 'label', text));
    switch (item.kind) {
      case 'assistant_process': {
        const type = correlation.process_type;
        li.dataset.process = type;
        li.classList.add(`process-${type}`);
        label(labels[type] || type);
        if (type === 'command_execution') {
          li.append(element('code', 'command', `$ ${details.command}`));
          const exit = details.exit_code === null || details.exit_code === undefined
            ? '' : ` (${labels.exit_code} ${details.exit_code})`;
          if (exit) li.append(element('span', 'meta', exit));
          if (details.output) li.append(element('pre', 'output', details.output));
        } else if (type === 'tool_call') {
          li.append(element('code', 'tool', details.name));
          li.append(element('pre', 'arguments', JSON.stringify(details.arguments, null, 2)));
        } else if (type === 'tool_result') {
          li.append(element('pre', 'output', details.output));
        } else {
          li.append(markdown(item.text));
        }
        break;
      }
      case 'assistant_message':
        li.append(markdown(item.text));
        break;
      case 'assistant_final':
        label(labels.final);
        li.append(markdown(item.text));
        break;
      case 'user_input_required':
        label(labels.question);
        li.append(markdown(item.text));
        break;
      case 'interaction_reply':
        label(labels.reply);
        li.append(document.createTextNode(item.text));
        break;
      case 'orchestration_notice': {
        const status = correlation.status;
        let text = item.text;
        if (correlation.resolution_mode === 'auto_decide_timeout') text = labels.auto_decided;
        else if (status === 'failed') text = correlation.error_message ? `${labels.failed}: ${correlation.error_message}` : `${labels.failed}.`;
        else if (status && labels[status]) text = labels[status];
        li.append(document.createTextNode(text));
        break;
      }
      default:
        li.append(document.createTextNode(item.text));
    }
    return li;
  }

  function openChat() {
    if (!chat || chatSource) return;
    chatSource = new EventSource(url(`${chat.dataset.chat}?cursor=${cursor}`));
    chatSource.addEventListener('chat_event', (event) => {
      const item = JSON.parse(event.data);
      if (item.seq <= cursor) return;
      cursor = item.seq;
      const follow = following(chat);
      const entry = render(item);
      if (entry) chat.append(entry);
      if (follow) chat.scrollTop = chat.scrollHeight;
    });
    chatSource.addEventListener('end', () => {
      chatSource.close();
      chatSource = null;
    });
    chatSource.addEventListener('error', () => retry(chatSource, () => { chatSource = null; openChat(); }));
  }

  document.body.addEventListener('run-resumed', () => { changed(); open(); openChat(); });
  open();
  openChat();
})();

// A run form's drop zone (`data-dropzone`): files dropped on it become its file input's files
// (added to those chosen before), and the names chosen are listed under it.
(function () {
  for (const zone of document.querySelectorAll('[data-dropzone]')) {
    const input = zone.querySelector('input[type=file]');
    const list = zone.querySelector('.dropped');
    const show = () => {
      list.replaceChildren(...Array.from(input.files, (file) => {
        const item = document.createElement('li');
        item.textContent = file.name;
        return item;
      }));
    };
    zone.addEventListener('dragover', (event) => {
      event.preventDefault();
      zone.classList.add('over');
    });
    zone.addEventListener('dragleave', () => zone.classList.remove('over'));
    zone.addEventListener('drop', (event) => {
      event.preventDefault();
      zone.classList.remove('over');
      const all = new DataTransfer();
      for (const file of [...input.files, ...event.dataTransfer.files]) all.items.add(file);
      input.files = all.files;
      show();
    });
    input.addEventListener('change', show);
  }
})();

// On a phone the nav folds behind its button.
(function () {
  const toggle = document.querySelector('.menu-toggle');
  if (!toggle) return;
  toggle.addEventListener('click', () => {
    const open = toggle.closest('header').classList.toggle('open');
    toggle.setAttribute('aria-expanded', String(open));
  });
})();

// The settings filter: rows whose variable, flag or help holds the text; areas left empty hide.
(function () {
  const filter = document.getElementById('settings-filter');
  if (!filter) return;
  filter.addEventListener('input', () => {
    const wanted = filter.value.trim().toLowerCase();
    for (const area of document.querySelectorAll('.settings-area')) {
      let shown = 0;
      for (const row of area.querySelectorAll('tbody tr')) {
        const hit = !wanted || row.textContent.toLowerCase().includes(wanted);
        row.hidden = !hit;
        if (hit) shown += 1;
      }
      area.hidden = shown === 0;
    }
  });
})();

// A duration still growing ([data-live-ms]: its value when the page was made) ticks each
// second between the page's refreshes, in the words the service writes it (time.rs `span`).
(function () {
  function span(ms) {
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
    if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${String(Math.floor(ms / 1000) % 60).padStart(2, '0')} s`;
    return `${Math.floor(ms / 3600000)} h ${String(Math.floor(ms / 60000) % 60).padStart(2, '0')} min`;
  }
  // Looked at four times a second, so a node swapped in is counted from within 250 ms of it.
  setInterval(() => {
    const now = Date.now();
    for (const node of document.querySelectorAll('[data-live-ms]')) {
      if (!node.liveSince) node.liveSince = now;
      node.textContent = span(Number(node.dataset.liveMs) + now - node.liveSince);
    }
  }, 250);
})();
