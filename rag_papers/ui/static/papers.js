// The Papers tab's list (a gr.HTML; its js_on_load, with element and trigger in scope): its page buttons and
// "Ask about this paper" become the list's custom events 'goto' and 'ask' (chat_app.py wires them). The list
// is redrawn inside element, so one delegated listener serves every page.
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
