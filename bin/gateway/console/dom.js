// Building the page. Everything that comes from the API (agent ids, payloads, error details) is attacker-
// controlled: it only ever enters the page as text nodes or attribute values, never as markup.

/**
 * An element: `h('td', {class: 'num'}, 'text', child, ...)`. Strings and numbers become text nodes; null,
 * undefined and false are skipped; arrays are flattened. Attributes: `class`, `dataset` (an object), `on<event>`
 * (a listener), boolean `true`/`false` for boolean attributes, anything else through setAttribute.
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'dataset') {
      for (const [key, data] of Object.entries(value)) element.dataset[key] = String(data);
    } else if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'value') {
      element.value = value;
    } else if (value === true) {
      element.setAttribute(name, '');
    } else {
      element.setAttribute(name, String(value));
    }
  }
  append(element, children);
  return element;
}

function append(parent, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.append(child);
    else parent.append(document.createTextNode(String(child)));
  }
}

/** Replaces the children of `element` with `children`. */
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/** A labelled form field; `control` gets an id from `id` and is described by `help`. */
export function field(labelText, control, { id, help, grow } = {}) {
  control.id = id;
  const helpNode = help ? h('span', { class: 'help', id: `${id}-help` }, help) : null;
  if (helpNode) control.setAttribute('aria-describedby', helpNode.id);
  return h('div', { class: grow ? 'field grow' : 'field' }, h('label', { for: id }, labelText), control, helpNode);
}

/** A table with a header row; `columns` are `[label, className?]`. */
export function table(columns, rows, attributes = {}) {
  return h(
    'div',
    { class: 'table-wrap' },
    h(
      'table',
      attributes,
      h('thead', {}, h('tr', {}, columns.map(([label, className]) => h('th', { class: className, scope: 'col' }, label)))),
      h('tbody', {}, rows),
    ),
  );
}

/** The "nothing here" state of a list. */
export function empty(title, text) {
  return h('div', { class: 'empty', 'data-testid': 'empty' }, h('strong', {}, title), text);
}

/** Copies `text` to the clipboard; `button` says whether it worked. */
export async function copyText(text, button) {
  const label = button.textContent;
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  } catch {
    button.textContent = 'Copy failed: select the text';
  }
  setTimeout(() => { button.textContent = label; }, 1500);
}

/**
 * A secret shown this once: a modal dialog with `value` as read-only text, a copy button and the `body` paragraphs.
 * Closing it (the button, Escape) removes the dialog, and the secret with it, from the page; then `onClosed` runs.
 * Its parts are named `<kind>-dialog`, `<kind>-value`, `<kind>-copy`, `<kind>-close` for tests.
 */
export function showOnce({ kind, label, value, title, body, onClosed }) {
  const text = h('input', {
    type: 'text', readonly: true, value, spellcheck: 'false', autocomplete: 'off', class: 'mono token',
    'aria-label': label, 'data-testid': `${kind}-value`,
  });
  const copy = h('button', { type: 'button', class: 'button', 'data-testid': `${kind}-copy` }, 'Copy');
  copy.addEventListener('click', () => copyText(text.value, copy));
  const done = h('button', { type: 'button', class: 'button ghost', 'data-testid': `${kind}-close` }, 'I have stored it — close');
  const [first, ...rest] = body;
  const dialog = h(
    'dialog',
    { class: 'token-dialog', 'aria-labelledby': `${kind}-title`, 'data-testid': `${kind}-dialog` },
    h('h2', { id: `${kind}-title` }, ...title),
    first,
    h('div', { class: 'token-line' }, text, copy),
    ...rest,
    h('div', { class: 'dialog-actions' }, done),
  );
  dialog.addEventListener('close', () => {
    text.value = '';
    dialog.remove();
    onClosed();
  });
  done.addEventListener('click', () => dialog.close());
  document.body.append(dialog);
  dialog.showModal();
  text.select();
}
