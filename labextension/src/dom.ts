/** A tiny element builder for the panel's plain-DOM rendering. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | undefined> = {},
  ...children: (Node | string | null | undefined)[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) {
      continue;
    }
    if (k === 'class') {
      el.className = String(v);
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  for (const c of children) {
    if (c !== null && c !== undefined) {
      el.append(c);
    }
  }
  return el;
}

/** A horizontal bar 0-100 %. */
export function meter(cls: string, percent: number, label: string): HTMLElement {
  const p = Math.max(0, Math.min(100, percent));
  const fill = h('div', { class: 'jp-schedulearn-meter-fill', style: `width: ${p.toFixed(1)}%` });
  return h(
    'div',
    { class: `jp-schedulearn-meter ${cls}`, title: label, 'data-value': p.toFixed(1) },
    fill,
    h('span', { class: 'jp-schedulearn-meter-label' }, label)
  );
}
