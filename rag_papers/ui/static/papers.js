// The Papers tab's list (a gr.HTML; its js_on_load, with element and trigger in scope): its page buttons,
// "Ask about this paper" and the boxes that select papers to remove become the list's custom events 'goto',
// 'ask' and 'pick' (chat_app.py wires them). The list is redrawn inside element, so one delegated listener
// serves every page; the selection is kept on the server (a box comes back ticked on any page).
element.addEventListener('click', (ev) => {
  const b = ev.target && ev.target.closest ? ev.target.closest('button') : null;
  if (!b || !element.contains(b) || b.disabled) return;
  if (b.hasAttribute('data-page')) {
    ev.preventDefault();
    trigger('goto', {page: Number(b.getAttribute('data-page'))});
    const top = element.querySelector('.rp-papers-head');
    if (top && top.getBoundingClientRect().top < 0) top.scrollIntoView({block: 'start'});
  } else if (b.classList.contains('rp-ask-paper')) {
    ev.preventDefault();
    trigger('ask', {id: b.getAttribute('data-id') || ''});
  }
});
element.addEventListener('change', (ev) => {
  const box = ev.target;
  if (!box || !box.classList || !box.classList.contains('rp-pick-box') || !element.contains(box)) return;
  trigger('pick', {id: box.getAttribute('data-id') || '', on: Boolean(box.checked)});
});
// A redraw may patch the old rows in place rather than replace them, and a box the user ticked keeps its
// ticked state through a patch that drops its `checked` attribute: after each redraw every box shows what the
// server sent (the session's selection), not what a box at the same place showed before.
if (typeof watch === 'function') {
  watch('value', () => {
    for (const box of element.querySelectorAll('input.rp-pick-box')) box.checked = box.hasAttribute('checked');
  });
}
