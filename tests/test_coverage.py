"""Answers that address the question, and say what the abstracts don't (issue 25).

The reported cases, each over the real seeds index with the packaged embedding model: a follow-up
about limitations the abstract never states, a comparison that quoted one side, a "which papers"
list that left a paper out, names no abstract contains, and LLM rewrites of follow-ups that were
junk. The LLM cases use the Ollama stand-in (tests/ollama_stub.py) and the packaged SmolLM2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import FakeBackend, run_main
from test_integrity import abba_id

from rag_papers.chat import ChatSession, Engine, usable_rewrite
from rag_papers.config import CoverageSettings, Settings
from rag_papers.judge.aspects import analyse, decide, name_found, states_facet
from rag_papers.judge.question import asked_facet, comparison_sides, scope_asked, split_question
from rag_papers.judge.words import (
    BEST,
    CODE,
    COMBINATION,
    DATA,
    FIGURES,
    HOW,
    LIMITATIONS,
    LOOSE_MATCH,
    NAMED,
    PROOF,
    RESULTS,
    SCOPE,
    SETUP,
    VALIDATION,
    WHY,
)
from rag_papers.keyword import paper_text
from rag_papers.llm import BackendDefaults, ExtractiveBackend

BACKGROUND_PAPERS = CoverageSettings().background_papers


def with_coverage(settings: Settings, **rules: Any) -> Settings:
    """``settings`` with some of its coverage rules changed (``Settings.coverage``)."""
    return settings.model_copy(update={"coverage": settings.coverage.model_copy(update=rules)})


SEEDS_TEXT: list[str] = []


def seed_id(fragment: str) -> str:
    from conftest import SEEDS

    from rag_papers.corpus import content_hash

    for path in sorted(SEEDS.glob("*.txt")):
        for para in path.read_text(encoding="utf-8").split("\n\n"):
            text = " ".join(para.split())
            if fragment in text:
                return content_hash(text)
    raise AssertionError(fragment)


SWAX = "we introduce SWAX"
FLASHLLA = "We then introduce {FlashLLA}"
ES_DLLM = "Diffusion large language models (dLLMs) are emerging"


# ------------------------------------------------------------------ splitting a question
@pytest.mark.parametrize(
    ("question", "names", "phrases"),
    [
        ("what does DoRA report on GLUE?", ["DoRA", "GLUE"], []),
        (
            "which papers use speculative decoding with a draft model to speed up LLM inference?",
            [],  # "LLM" names the field, not a method (rag_papers/words/generic_names.txt)
            ["speculative decoding", "draft model", "speed", "inference"],
        ),
        ("How does SWAX compare with FlashLLA?", ["SWAX", "FlashLLA"], []),
        ("I need a paper that explores picking shorter prompts", [], ["picking shorter prompts"]),
        ("which method reaches 12% lower error on ES-dLLM benchmarks", ["12%", "ES-dLLM"], ["lower error"]),
        # A letter standing for a number is no name (read round 17: "The abstracts don't mention N-times").
        ("Which papers report a numeric speedup, such as an N-times speedup or a k-fold cut?", [], ["speedup"]),
        # Read round 18: "The abstracts don't mention AIs" and "... GNN's".
        ("Can text AIs that fill in many blanks at once be sped up?", [], ["text"]),
        ("Which paper explains what drives a temporal GNN's prediction?", ["GNN"], ["temporal"]),
        # Read round 21: names a question lists are each a name ("The abstracts don't mention Qwen LLaDA").
        ("Which abstracts name the LLMs (e.g. Llama, Qwen, LLaDA) they ran on?", ["Llama", "Qwen", "LLaDA"], []),
        # Read round 21: a manner adverb is no aspect ("The abstracts don't mention Mechanistically").
        ("Mechanistically, how do LMs pick up a twisted arithmetic rule?", [], ["twisted arithmetic rule"]),
        # Read round 19: the names of an example quoted in the question are no aspects ("... mention Tom or Sara").
        ("If a chatbot reads 'Tom owns a bike and Sara owns a kite', who owns the kite?", [], ["kite"]),
    ],
)
def test_a_question_splits_into_names_and_descriptions_without_boilerplate(
    question: str, names: list[str], phrases: list[str]
) -> None:
    got_names, got_phrases = split_question(question)
    assert got_names == names
    for p in phrases:
        assert any(p in g for g in got_phrases), (p, got_phrases)
    boiler = {"need", "paper", "explores", "which", "method", "does", "use", "report"}
    assert not boiler & {w.lower() for g in got_phrases for w in g.split()}
    assert not any(w.endswith("ically") for g in got_phrases for w in g.split())
    assert not {"Tom", "Sara"} & {w for g in got_phrases for w in g.split()}


@pytest.mark.parametrize(
    ("question", "facet"),
    [
        ("and what about its limitations?", "limitations"),
        ("what are the weaknesses of BAM?", "limitations"),
        ("which datasets does ABBA evaluate on?", "data"),
        ("how well does ES-dLLM do, in numbers?", "results"),
        ("How does SWAX compare with FlashLLA?", "comparison"),
        ("why does a larger sliding window not help?", "why"),
        ("what does ABBA claim?", None),
        ("How many GPUs did the ABBA experiments need?", SETUP),
        ("what learning rate and batch size does BAM train with?", SETUP),
        ("how much memory does FlashLLA use at inference?", SETUP),
        # A run's cost compared between two papers is still a run's cost: both sides' abstracts must state it.
        ("How much GPU memory does ABBA need during training compared with LoRA?", SETUP),
        ("how many minutes per structure does CryoNet.Refine need versus Phenix?", SETUP),
        # Read round 21: time saved is a figure of the results, not a run's cost ("The abstracts don't mention training or compute
        # details" of a paper that gives its cuts in training time).
        ("How much time did it save for LLMs and for vision transformers?", FIGURES),
        ("How much training time does the teaching method cut?", FIGURES),
        ("How much time does one CryoNet.Refine run take?", SETUP),
        ("Is there a formal proof that Smooth-Leaky activations prevent plasticity loss?", PROOF),
        ("Has the federated payment mechanism been piloted with real hospitals?", VALIDATION),
        ("the paper that studies diffusion models trained on data lying on a line", None),
        # Read round 13: public code; "what the score-smoothing study says" asks for no score.
        ("Is there public code for the Smooth-Leaky activation functions?", CODE),
        # Read round 14: a multiple of the training context length is a result; a context length asked for is not.
        ("it could retrieve information at some huge multiple of the training context length?", None),
        ("What training context length did BAM use?", SETUP),
        (
            "What does K-Flow propose about how flows can be organised, compared with what the score-smoothing study "
            "says about why diffusion models generate novel samples?",
            None,
        ),
        ("how much faster is ES-dLLM?", "results"),
        # What an abstract seldom states, asked as such (rounds 4 and 5's absent facets, read after scoring):
        ("which imperfect information games was LAMIR tested on?", NAMED),
        ("Which of the 21 frontier models scored best on the personalized reasoning evaluation?", BEST),
        ("Which frontier model produced the reference outputs?", NAMED),
        ("What confidence threshold does the early-exit method use?", FIGURES),
        ("How much accuracy does ES-dLLM lose on math benchmarks?", FIGURES),
        ("Does AtteNT also speed up training of convolutional networks or graph neural networks?", SCOPE),
        ("Where does CryoNet.Refine fail, for instance at low map resolution?", "limitations"),
        ("At what parameter count was SWAX trained, and on how many tokens?", SETUP),
        ("extra sampling time per image introduced by CO3's corrective guidance?", SETUP),
        ("Were any of the RNAs designed by the dual diffusion model validated in the wet lab?", VALIDATION),
        ("Were any robot designs built and tested in the real world?", VALIDATION),
        ("On the leaderboard, which family came out on top: fingerprint, GNN or SMILES models?", BEST),
        ("Which of the four model families actually performs best?", BEST),
        ("How does TemGX runtime scale on graphs with millions of edges?", SETUP),
        ("How much faster is CryoNet.Refine than Rosetta, in minutes per structure?", SETUP),
        ("Can the zooming algorithm cope with adversarially chosen delays instead of stochastic ones?", SCOPE),
        (
            "Has anyone combined Dirichlet-style routing with diffusion language models to cut inference cost?",
            COMBINATION,
        ),
        ("Which papers apply mixture-of-experts routing to diffusion language models?", COMBINATION),
        ("Was ABBA evaluated on vision transformers or image diffusion models?", SCOPE),
        ("Is the STEDF backdoor detector robust to adaptive attackers who know how it works?", SCOPE),
        ("Among the 21 frontier models evaluated in PREFDISCO, which one handled personalized reasoning best?", BEST),
        ("Has the pay-what-you-contribute mechanism been tested in a real deployment?", VALIDATION),
        # ... and the same words where they ask for nothing of the kind (dev's answerable questions):
        ("Can chatbots be trained to get better at changing people's minds, even small, cheap ones?", None),
        ("Which papers apply machine learning to molecular biology or drug discovery?", None),
        ("Which papers study failure modes or security vulnerabilities of text-to-image diffusion models?", None),
        ("Which papers report the best results on GSM8K?", "results"),
        (
            "Is there work bringing dynamic programming into in-context RL so it can improve on the data rather than imitate it?",
            COMBINATION,  # not a scope by contrast: it asks for papers (and its gold paper joins the two)
        ),
        ("Which papers involve games or game theory?", None),
        ("a differentiable gate that separates which experts fire from how much weight each one gets", "results"),
        ("how can you fix it at generation time without touching the weights?", HOW),
        ("raising the effective rank of adapter updates for the same trainable parameter count", None),
        ("Is there work on helping AI graders judge answers by giving them a model answer?", None),
    ],
)
def test_the_facet_a_question_asks_for(question: str, facet: str | None) -> None:
    assert asked_facet(question) == facet


@pytest.mark.parametrize(
    ("question", "sentence", "states"),
    [
        # Code asked for: a link or a release, not a sentence about the method's kernel.
        ("Is the code released?", "Our code is available at https://github.com/x/y.", True),
        ("Is the code released?", "We provide a hardware-efficient FlashLLA kernel.", False),
        # A proof asked for: a sentence that proves or guarantees, not one that shows by experiment.
        ("Is there a formal proof that X prevents Y?", "We prove that X converges at a linear rate.", True),
        ("Is there a formal proof that X prevents Y?", "We show that activation choice is a primary lever.", False),
        # Limits: the paper's own, not the problem's or earlier work's.
        (
            "what was the downside of using really short windows?",
            "The issue with small sliding windows is that they are detrimental for short-context tasks.",
            True,
        ),
        # A training time cut: a share of it answers; it does not answer how many GPU hours a run took.
        (
            "the paper that cut transformer training time by roughly 13%",
            "We observe training time reductions of 13.01% for LLMs.",
            True,
        ),
        ("How many GPU hours does it need?", "We observe training time reductions of 13.01% for LLMs.", False),
        ("What are the limitations of X?", "Our analysis is limited to linear models.", True),
        ("What are the limitations of X?", "Directly feeding raw parameters into networks fails to address it.", False),
        ("What are the limitations of X?", "However, existing methods are limited to short contexts.", False),
        (
            "What drawbacks of adapter tuning motivate X?",
            "However, existing methods are limited to short contexts.",
            True,
        ),
        # Read round 23: a failure a paper identified in another approach is its finding, said as a pathology.
        (
            "I remember a paper about evolving robot bodies with one shared controller that identified a failure mode "
            "in which the designs become too alike. What was it called?",
            "We find the latter results in diversity collapse, a previously unknown pathology whereby designs converge.",
            True,
        ),
        (
            "What are the limitations of zero-shot evolution?",
            "We find the latter results in diversity collapse, a previously unknown pathology whereby designs converge.",
            False,
        ),
        # Names asked for: one standing where a thing used is named, not a subject, the field or the paper's own.
        # "Which families of ...?" is answered by what each is based on (read round 14), no other question is.
        (
            "Which families of baseline models are on its leaderboard?",
            "A leaderboard with baselines across 4 families: fingerprint-based, GNN-based, PLM-based models.",
            True,
        ),
        ("Which baselines does it compare against?", "We compare against GNN-based models.", False),
        ("Which games was LAMIR tested on?", "We evaluate LAMIR on Leduc poker and Liar's Dice.", True),
        ("Which games was LAMIR tested on?", "While MuZero enables effective model learning for search.", False),
        ("Which of the 21 frontier models scored best?", "It reveals limitations in current LLMs’ abilities.", False),
        ("Which base model is it built on?", "Agents aim to meet a PAC-style accuracy threshold.", False),
        # Which performs best: a sentence that names a winner, not "to the best of our knowledge".
        ("Which family performs best?", "GNN-based models outperform fingerprints on 20 of 35 datasets.", True),
        ("Which family performs best?", "It is, to the best of our knowledge, the largest resource.", False),
        # Validation outside a computer: said as such.
        ("Were the designs validated in the wet lab?", "Designs were synthesized and tested in vitro.", True),
        ("Were the designs validated in the wet lab?", "Designs reach high in-silico foldability scores.", False),
        # Figures: a number of what is asked, not one inside a name.
        ("What confidence threshold does it use?", "It is integrated into existing o1-like reasoning LLMs.", False),
        ("What confidence threshold does it use?", "Decoding stops at a confidence threshold of 0.9.", True),
        ("What confidence threshold does it use?", "It cuts the tokens generated by 31%.", False),
        ("What false-positive rate does it have?", "It detects backdoors at a 99% rate.", False),
        ("What false-positive rate does it have?", "Its false positive rate stays below 1%.", True),
        ("How much accuracy does it lose?", "Accuracy drops by only 0.4 points.", True),
        ("what results does it report?", "Learning systems natively based on 3D Gaussian Splatting.", False),
        ("what results does it report?", "It improves accuracy by 4.1 points.", True),
        ("some theory result on ReLU networks?", "Our findings demonstrate that singularities are connected.", True),
    ],
)
def test_what_states_the_facet_asked_for(question: str, sentence: str, states: bool) -> None:
    facet = asked_facet(question)
    assert states_facet(question, facet, ["LAMIR"])(sentence) is states, facet


def test_a_scope_question_is_covered_only_by_the_paper_asked_about_naming_the_target() -> None:
    """ "Does AtteNT also speed up training of CNNs or GNNs?" was answered plainly: each word was in some source.
    The target must be named, in words, by the paper the question is about."""
    q = "Does AtteNT also speed up training of convolutional networks or graph neural networks?"
    assert scope_asked(q) == "convolutional networks or graph neural networks"
    atten = ("AtteNT", "AtteNT selects examples to teach transformers, cutting training time by 13%.")
    tgnn = ("TemGX", "We explain temporal graph neural networks with a training-free method.")
    cov = decide(analyse(q, [atten, tgnn], None), [1, 2])
    assert "convolutional networks or graph neural networks" in [a.text for a in cov.uncovered]
    gnn = ("AtteNT on graphs", "AtteNT also teaches graph neural networks, speeding up their training.")
    assert decide(analyse(q, [gnn], None), [1]).uncovered == []


@pytest.mark.parametrize(
    ("question", "facet"),
    [
        # Read round 22: "still answer correctly" asks whether quality holds, not whether the paper reaches a
        # setting ("The abstracts don't mention answer correctly").
        (
            "Can reasoning AI models stop 'overthinking' and still answer correctly, and how much shorter do their "
            "reasoning chains get?",
            RESULTS,  # "how much shorter": a result
        ),
        ("Does early exit make them faster and still accurate?", None),
        ("Does the STEDF detector still work against adaptive attackers?", SCOPE),
        # Read round 22: a "transfer function" is a thing, not a verb that carries a method over.
        (
            "Can changing only the per-neuron transfer function keep a network able to pick up new tasks after a long "
            "stream of shifting ones?",
            None,
        ),
        ("Did the controllers found by zero-shot evolution transfer to physically built robots?", SCOPE),
        # Read round 22: "decide which specialists to switch on and how much weight each one gets" asks how, not for
        # a figure: an indirect question keeps the subject before its verb.
        (
            "How can a model made of many specialist sub-networks decide, in a way gradients can flow through, both "
            "which specialists to switch on and how much weight each one gets?",
            HOW,
        ),
        ("Does ABBA beat LoRA, and how much memory does it save?", SETUP),
        ("Which dataset did it use, and how many samples?", FIGURES),  # elliptical, after a comma: still asked
        ("What does TemGX explain, and how many times faster is it?", FIGURES),
        # Read rounds 17, 18 and 22 each asked blind which physics engine the robot paper used: a name asked for.
        ("Which differentiable physics engine did the zero-shot evolution work on robot morphology use?", NAMED),
        ("why do multilingual search engines keep showing me English pages?", WHY),
    ],
)
def test_an_indirect_question_or_a_quality_kept_is_no_facet_of_its_own(question: str, facet: str | None) -> None:
    assert asked_facet(question) == facet


def test_a_paper_looked_for_is_no_scope_question() -> None:
    """Read round 13: "Is there an image generator whose flow runs ... to fine detail, instead of across noise
    levels?" looks for a paper; it was read as asking whether one reaches "fine detail" and caveated."""
    looked_for = (
        "Is there an image generator whose flow runs across spectral scale, from coarse structure to fine detail, "
        "instead of across noise levels?"
    )
    assert scope_asked(looked_for) is None
    asked_of_one = (
        "Can the delay-aware zooming algorithm cope with adversarially chosen delays instead of stochastic ones?"
    )
    assert scope_asked(asked_of_one) == "adversarially chosen delays"


def test_a_contrasted_clause_is_no_scope(engine: Engine) -> None:
    """Read round 26: "Can blurring the ... target explain why generative models produce novel samples instead of
    copying their training points?" was read as asking whether a paper reaches the whole clause before "instead
    of", which no abstract has word for word, so its gold paper was quoted under "The abstracts don't mention
    blurring ...". A contrast asks of a setting ("adversarially chosen delays"), a few words long; a clause with
    its own verb is the claim asked about, in other words."""
    clauses = [
        "Can blurring the training-set-optimal noise-prediction target explain why generative models produce novel "
        "samples instead of copying their training points?",
        "Can a sequence model pretrained on offline trajectories do value-based improvement inside its prompt, rather "
        "than just imitating, so it copes with poor-quality demonstrations?",
    ]
    for q in clauses:
        assert scope_asked(q) is None, q
    ans = engine.ask(clauses[0], ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and ans.uncovered == [], ans.uncovered
    assert seed_id("score smoothing") in ans.citations
    # settings a contrast asks of stay scopes, however they are said
    assert (
        scope_asked("Has IG-FWI been demonstrated on 3D field data or on medical ultrasound imaging rather than 2D?")
        == "medical ultrasound imaging"
    )
    assert (
        scope_asked("Can the zooming algorithm cope with adversarially chosen delays instead of stochastic ones?")
        == "adversarially chosen delays"
    )


@pytest.mark.parametrize(("phrase", "rare"), [("orthogonalize", True), ("tidies", False), ("shakier", False)])
def test_a_rare_form_of_an_everyday_word_counts_as_everyday(phrase: str, rare: bool) -> None:
    """Read rounds 12 and 13: "tidies" (Zipf 1.6) and "shakier" are inflections of everyday words ("tidy" is 3.5):
    how technical a question's words are (``coverage.question_zipf``) reads each at its commonest form."""
    from rag_papers.judge.question import question_zipf

    z = question_zipf(phrase)
    assert z is not None and (z < 2.0) is rare, z


def test_a_comparison_has_two_sides_only_when_two_things_are_named() -> None:
    assert comparison_sides("How does SWAX compare with FlashLLA?") == ["SWAX", "FlashLLA"]
    assert comparison_sides("ABBA vs LoRA: which is more expressive?") == ["ABBA", "LoRA"]
    assert comparison_sides("how does ABBA compare to prior work?") == []
    assert comparison_sides("what is the difference between BAM and ALiBi?") == ["BAM", "ALiBi"]
    assert comparison_sides("how does ABBA compare with DoRA on GLUE?") == ["ABBA", "DoRA"]


# ------------------------------------------------------------------ the reported cases, extractive
def test_a_follow_up_about_limitations_the_abstract_never_states_says_so(engine: Engine) -> None:
    """Reported: "and what about its limitations?" quoted the same two ABBA sentences, "All 2 claims supported"."""
    chat = ChatSession(engine)
    backend = ExtractiveBackend(engine.settings)
    first = chat.ask("what does ABBA claim?", backend)[1].run()
    assert first.citations[:1] == [abba_id()] and first.uncovered == []
    second = chat.ask("and what about its limitations?", backend)[1].run()
    assert "limitations" in second.uncovered
    assert second.answer.startswith("The abstracts don't mention limitations")
    assert second.caveat is not None and second.answer.startswith(second.caveat)
    assert abba_id() in second.citations  # still the closest: the line says what it does not cover


def test_a_comparison_quotes_both_compared_papers(engine: Engine) -> None:
    """Reported: "How does SWAX compare with FlashLLA?" (a suggested question) quoted SWAX alone."""
    ans = engine.ask("How does SWAX compare with FlashLLA?", ExtractiveBackend(engine.settings)).run()
    assert not ans.refused
    assert seed_id(SWAX) in ans.citations and seed_id(FLASHLLA) in ans.citations
    lines = [ln for ln in ans.answer.splitlines() if ln.startswith("- ")]
    assert len(lines) >= 2


def test_which_papers_lists_every_paper_above_the_floor(engine: Engine) -> None:
    """Reported: "which papers work on diffusion language models?" listed three papers but not ES-dLLM."""
    ans = engine.ask("which papers work on diffusion language models?", ExtractiveBackend(engine.settings)).run()
    assert seed_id(ES_DLLM) in ans.citations
    lines = [ln for ln in ans.answer.splitlines() if ln.startswith("- ")]
    assert len(lines) == len(ans.citations)  # one line a paper
    above = set(ans.search["results"][i]["id"] for i in range(len(ans.search["results"]))) if ans.search else set()
    assert set(ans.citations) <= above


@pytest.mark.parametrize(
    "q",
    [
        "Which papers give a GitHub link to their code in the abstract?",
        "Which of these papers link to a public GitHub repository with their code?",
        # Read round 23: refused, its relevance (0.26) under the band where one sentence may pass it. It asks only
        # for the papers' code, so the papers that link it are the evidence.
        "Which of these papers give a public GitHub repository for their code?",
    ],
)
def test_which_papers_release_code_lists_the_papers_that_link_it(engine: Engine, q: str) -> None:
    """Blind writers asked this in each of rounds 17 to 21: it was answered with the loose-match line and quoted
    sentences about the methods (link sentences are no quotes for a topic), one or two of the three papers that give
    a link. A paper's property asked of a list is answered by the papers whose abstracts state it, each with its
    sentence; a paper that only promises code later is no link."""
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    linked = {seed_id("Our code is publicly available at: https://github.com/CERT-Lab/abba")}
    linked |= {seed_id("https://github.com/paoch"), seed_id("https://github.com/NJU-RL")}
    assert not ans.refused and set(ans.citations) == linked, ans.citations
    assert ans.uncovered == [] and ans.caveat is None, ans.uncovered
    lines = [ln for ln in ans.answer.splitlines() if ln.startswith("- ")]
    assert len(lines) == 3 and all(ln.count("https://github.com") == 1 for ln in lines), lines
    assert ans.claims and not ans.unsupported, ans.unsupported
    # Asked of one paper that gives no link, the code is still said missing.
    one = engine.ask("Is the code of PepBenchmark on GitHub?", ExtractiveBackend(engine.settings)).run()
    assert one.refused or one.uncovered, one.answer


@pytest.mark.parametrize(
    ("question", "sentence", "names", "states"),
    [
        # Read rounds 18, 20 and 21: another approach's shortcomings, asked of the paper that points them out, are
        # stated as what that approach is limited by or relies on.
        (
            "In the paper arguing that LoRA's expressivity is capped by its rank, what shortcoming do they point out "
            "in HiRA?",
            "Recent methods like HiRA aim to increase expressivity, but still rely on the structure of the weights.",
            ["LoRA", "HiRA"],
            True,
        ),
        (
            "What weaknesses of classical seismic waveform-matching imaging does the lazy-training analysis explain?",
            "Conventional FWI methods are limited by their notorious sensitivity to the accuracy of the initial models.",
            [],
            True,
        ),
        (
            "What shortcoming of adapter-only tuning pushes some people to update the whole backbone?",
            "However, both approaches have inherent limitations: PEFT often struggles to learn new knowledge.",
            ["ABBA"],
            True,
        ),
        # ... not the paper's own limits, asked of it by its name.
        (
            "What are the limitations of ABBA?",
            "Recent methods like HiRA aim to increase expressivity, but still rely on the structure of the weights.",
            ["ABBA"],
            False,
        ),
        (
            "What limitations does ABBA have?",
            "Conventional methods are limited by their sensitivity to the initial models.",
            ["ABBA"],
            False,
        ),
    ],
)
def test_others_limits_are_read_when_the_question_asks_for_them(
    question: str, sentence: str, names: list[str], states: bool
) -> None:
    assert asked_facet(question) == LIMITATIONS
    assert states_facet(question, LIMITATIONS, names)(sentence) is states


def test_a_model_built_on_and_a_run_s_rank_and_trainable_parameters_are_asked_as_such() -> None:
    """Read rounds 19, 21 and 23: "Which base diffusion model is CreatiDesign built on top of?" read as asking which
    performs best ("on top"), and answered plainly with "CreatiDesign outperforms existing models"; "What rank and
    how many trainable parameters did ABBA use compared with LoRA?" read as a comparison of the two."""
    built = "Which base diffusion model is CreatiDesign built on top of?"
    assert asked_facet(built) == NAMED
    assert not states_facet(built, NAMED, ["CreatiDesign"])("CreatiDesign outperforms existing models by a margin.")
    assert asked_facet("Which of the four families comes out on top?") == BEST
    assert asked_facet("Which model family came out on top of the leaderboard?") == BEST
    run = "What rank and how many trainable parameters did ABBA use compared with LoRA on the reasoning benchmarks?"
    assert asked_facet(run) == SETUP
    test = states_facet(run, SETUP, ["ABBA", "LoRA"])
    assert not test("This leads to significantly higher expressivity under the same parameter budget.")
    assert test("We fine-tune with rank r = 16, training 2.3M trainable parameters.")


@pytest.mark.parametrize(
    ("question", "facet"),
    [
        # Read rounds 17 to 23: absent facets asked blind more than once and answered plainly.
        ("Did PREFDISCO validate its personas with a study involving real human users?", VALIDATION),
        ("Was the pay-what-you-contribute mechanism for federated learning tested empirically on real data?", SCOPE),
        ("Does the STEDF backdoor detector hold up against adaptive attackers who know how the detector works?", SCOPE),
        (
            "Which reinforcement learning algorithm and which reward functions does the RNA co-design diffusion model "
            "use at inference time?",
            NAMED,
        ),
        # ... and the same words where they ask for nothing of the kind.
        (
            "The paper testing whether transformers can infer which earlier tokens each token depends on: what optimal "
            "algorithm does it show a two-layer transformer can implement?",
            None,
        ),
        ("Was it tested on real data?", SCOPE),
    ],
)
def test_validation_scope_and_names_asked_in_other_words(question: str, facet: str | None) -> None:
    assert asked_facet(question) == facet


def test_descriptions_are_never_said_missing_whatever_the_alternatives() -> None:
    """Issue 46: a description no abstract covers was said missing ("The abstracts don't mention mechanistically");
    on the read questions that rule flagged 15 near-misses and caveated 44 answerable questions
    (eval/results/ablation.md), so it went, and with it the rule that covered "X or Y" by either."""
    q = "Which papers try to explain, theoretically or mechanistically, how transformers learn tasks in context?"
    theory = ("ICL theory", "We theoretically show that transformers learn tasks in context by Bayesian averaging.")
    for asked in (q, q.replace(" or ", " and ")):
        assert decide(analyse(asked, [theory], None, lambda w: 0 if w == "mechanistically" else 3), [1]).uncovered == []


def test_code_asked_of_papers_on_a_topic_lists_only_papers_on_it(engine: Engine) -> None:
    """ "Which papers on speech recognition release their code on GitHub?" listed ABBA, STEDiff and S-ICQL, plain:
    the papers were picked for their code however far their topic was. The topic is asked too: a paper is listed
    only when it addresses it, and when none does, the answer says so first."""
    backend = ExtractiveBackend(engine.settings)
    none = engine.ask("Which papers on speech recognition release their code on GitHub?", backend).run()
    assert none.refused or "speech recognition" in none.uncovered, (none.uncovered, none.answer)
    stediff = seed_id("https://github.com/paoch")
    some = engine.ask("Which papers on backdoor attacks release their code on GitHub?", backend).run()
    assert not some.refused and some.citations == [stediff] and some.uncovered == [], (some.citations, some.answer)


def test_two_topics_asked_of_one_paper_are_covered_only_by_a_paper_joining_them() -> None:
    q = "Which papers apply diffusion models to biomolecular 3D structures?"
    rna = ("RNA", "A discrete diffusion model designs RNA sequences and their biomolecular 3D structures.")
    moe = ("MoE", "A Dirichlet router for mixture-of-experts models.")
    dlm = ("dLLM", "Diffusion language models decode tokens in parallel.")
    assert decide(analyse(q, [rna], None), [1]).uncovered == []
    q2 = "Has anyone combined mixture-of-experts routing with diffusion language models?"
    missing = [a.text for a in decide(analyse(q2, [moe, dlm], None), [1, 2]).uncovered]
    assert missing == ["mixture-of-experts routing together with diffusion language models"], missing


def test_what_a_question_about_a_named_paper_asks_for_must_be_in_that_paper() -> None:
    """ "What's the exact formula of Smooth-Leaky?" was answered plainly from Smooth-Leaky's abstract, which gives
    none: the head of a wh-question about a named paper is now looked for in that paper."""
    smooth = ("Smooth-Leaky", "Smooth-Leaky activations keep plasticity in continual learning.")
    other = ("Other", "A closed-form formula for attention.")
    q = "What's the exact formula of Smooth-Leaky, and does it hurt accuracy?"
    assert "formula" in [a.text for a in decide(analyse(q, [smooth, other], None), [1, 2]).uncovered]
    stated = ("Smooth-Leaky", "Smooth-Leaky follows the formula x * sigmoid(x) with a leaky slope.")
    assert "formula" not in [a.text for a in decide(analyse(q, [stated], None), [1]).uncovered]
    # A kind of thing asked to be named is answered by the name, not by the kind's word (rounds 1-3's test part).
    cryo = ("CryoNet.Refine", "CryoNet.Refine outperforms Phenix.real_space_refine on model-map correlation.")
    for q2 in (
        "What baseline is CryoNet.Refine compared against?",
        "Which pretrained network does CryoNet.Refine use?",
    ):
        assert decide(analyse(q2, [cryo], None), [1]).uncovered == [], q2
    # No named paper, or a head of boilerplate only: nothing is added.
    assert all(
        a.text != "method" for a in decide(analyse("What method does Smooth-Leaky use?", [smooth], None), [1]).aspects
    )


def test_a_name_of_several_words_is_found_as_a_phrase() -> None:
    """ "Why does Decision Transformer struggle to stitch trajectories?" was answered plainly from an abstract that
    says "decision" in one sentence and "Transformer" in another."""
    q = "Why does Decision Transformer struggle to stitch together suboptimal trajectories?"
    apart = ("X", "We study sequential decision making. A Transformer reads the trajectories.")
    phrase = ("Y", "The decision-transformer family models returns; Decision Transformers stitch trajectories.")
    cov = decide(analyse(q, [apart], None), [1])
    assert "Decision Transformer" in [a.text for a in cov.uncovered]
    assert "Decision Transformer" not in [a.text for a in decide(analyse(q, [phrase], None), [1]).uncovered]
    # A run of names the question lists, or a name with its qualifier, is still matched word by word.
    listed = "What do PepBenchData, PepBenchPipeline and PepBenchLeaderboard each provide?"
    bench = ("PepBenchmark", "PepBenchmark has PepBenchData and a pipeline, PepBenchPipeline, and PepBenchLeaderboard.")
    assert decide(analyse(listed, [bench], None), [1]).uncovered == []


def test_a_paper_the_question_names_is_quoted(engine: Engine) -> None:
    """A comparison of a named paper with a described one (rounds 6-8: 10 of 30 such answers caveated) quoted
    the described paper alone and said "The abstracts don't mention ABBA", though ABBA's paper was retrieved."""
    q = (
        "Compare ABBA with the hybrid zeroth-/first-order fine-tuning approach: how does each try to overcome the "
        "limits of standard parameter-efficient fine-tuning?"
    )
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert abba_id() in ans.citations and "ABBA" not in ans.uncovered, (ans.citations, ans.uncovered)


def test_the_paper_retrieval_ranks_first_is_always_quoted(engine: Engine) -> None:
    """A lay question's best sentence in its paper can be far from its words: CO3 ranked first for this dev question
    but only K-Flow's sentence was close enough to quote, so the answer cited K-Flow alone."""
    q = (
        "When you ask a picture generator for 'a dog and a bicycle' and one object vanishes, how can you fix it at "
        "generation time without touching the weights?"
    )
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    co3 = seed_id("a cat and a clock")
    assert ans.search is not None and ans.search["results"][0]["id"] == co3
    assert not ans.refused and ans.citations[:1] == [co3], ans.citations


def test_a_paper_the_question_names_is_read_however_far_below_the_best(engine: Engine) -> None:
    """Read round 12: K-Flow's paper ranked second but under ``source_min_ratio`` of the first, so it was not among
    the sources, and the answer said "The abstracts don't mention K-Flow"."""
    q = (
        "Is the score-smoothing study of diffusion models doing the same kind of thing as K-Flow, or is one proposing "
        "a new generator while the other explains an existing one?"
    )
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert seed_id("we propose K-Flow") in ans.citations and "K-Flow" not in ans.uncovered, ans.uncovered


def test_a_relevant_but_loose_match_is_said_first(engine: Engine) -> None:
    """Lay near-misses on neighbouring topics pass every aspect the rules test (rounds 12 to 15: 7, 6, 7 and 5 of
    18 answered plainly); their retrieval relevance is just over the floor. Under ``loose_match`` the answer says
    first that the abstracts match only loosely; with it (and ``flat_lift``) at 0, as before, nothing is said."""
    q = "Why do AI chatbots sometimes refuse perfectly harmless requests?"
    result = engine.search(q)
    assert result.relevant and result.relevance < engine.settings.coverage.loose_match, result.relevance
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and LOOSE_MATCH in ans.uncovered
    assert ans.answer.startswith("The abstracts match this question only loosely")
    off = Engine(with_coverage(engine.settings, loose_match=0.0, flat_lift=0.0), engine.index)
    assert off.ask(q, ExtractiveBackend(off.settings)).run().uncovered == []


def test_a_technical_topic_no_abstract_is_about_is_said_to_match_loosely(engine: Engine) -> None:
    """Read round 27 (topics): "Which papers do out-of-distribution detection for image classifiers?" was answered
    plainly from the nearest papers (a backdoor detector among them), at a relevance well over ``loose_match``. Its best paper's cosine stands
    barely above the question's mean cosine over the index (``Engine.lift``), as for a topic no abstract is about;
    asked in technical words, that is said first. A question naming a paper the index has is exempt (it asks about
    that paper), and ``flat_lift`` 0 turns the rule off."""
    q = "Which papers do out-of-distribution detection for image classifiers?"
    result = engine.search(q, 10)
    assert result.relevant and result.relevance > engine.settings.coverage.loose_match, result.relevance
    lift = engine.lift(q, result)
    assert lift is not None and lift < engine.settings.coverage.flat_lift, lift
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and LOOSE_MATCH in ans.uncovered, ans.uncovered
    off = Engine(with_coverage(engine.settings, flat_lift=0.0), engine.index)
    assert LOOSE_MATCH not in off.ask(q, ExtractiveBackend(off.settings)).run().uncovered
    # a technical question on a topic the abstracts are about stands well above the field
    on_topic = "Which papers speed up inference of diffusion large language models without retraining?"
    assert LOOSE_MATCH not in engine.ask(on_topic, ExtractiveBackend(engine.settings)).run().uncovered


def test_the_field_sample_is_read_from_the_vectors_ingest_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Engine.lift``'s background comes from the head vectors ingest stored (each paper's title and opening), not
    from embedding the sampled abstracts again: that cost the first question after every ingest seconds (read in
    CI: an ask that should fail at a 0.5 s Ollama timeout took 4.6 s on a loaded machine). The lift stays the one
    ``flat_lift`` was chosen with, on title and abstract embedded whole (the model reads 256 tokens of either), within
    the differences measured over eval/qa.jsonl (at most 0.018; 8 of 3,913 decisions at 0.20 changed)."""
    import numpy as np

    fresh = Engine(engine.settings, engine.index)
    q = "Which papers do out-of-distribution detection for image classifiers?"
    result = fresh.search(q, 10)
    embedder = fresh.index.embedder
    real = embedder.embed_documents
    embedded: list[int] = []
    real_query = embedder.embed_query

    def counting(texts: list[str]) -> Any:
        embedded.append(len(texts))
        return real(texts)

    def counting_query(text: str) -> Any:
        embedded.append(1)
        return real_query(text)

    monkeypatch.setattr(embedder, "embed_documents", counting)
    monkeypatch.setattr(embedder, "embed_query", counting_query)  # the search embedded the question already
    lift = fresh.lift(q, result)
    monkeypatch.undo()
    assert embedded == [] and lift is not None
    papers = fresh.index.sample(BACKGROUND_PAPERS)
    whole = np.asarray(real([f"{p.title or ''} {p.abstract}" for p in papers]))
    best = max(h.dense_score for h in result.results[:5])
    assert abs(lift - (best - float(np.mean(whole @ np.asarray(embedder.embed_query(q)))))) < 0.02


def test_keyword_only_retrieval_has_no_lift(engine: Engine) -> None:
    """Under ``retrieval = "bm25"`` no cosine is computed (every hit's ``dense_score`` is 0), so the best paper
    seemed to stand below the field's mean cosine (a lift of -0.27): a number with no meaning, for which 64 papers
    were embedded. The lift is unknown there, and no technical question is said to match loosely."""
    bm25 = Engine(engine.settings.model_copy(update={"retrieval": "bm25"}), engine.index)
    q = "Which papers speed up inference of diffusion large language models without retraining?"
    result = bm25.search(q, 10)
    assert result.relevant and all(h.dense_score == 0 for h in result.results)
    assert bm25.lift(q, result) is None
    assert LOOSE_MATCH not in bm25.ask(q, ExtractiveBackend(bm25.settings)).run().uncovered


def test_a_loose_match_is_said_however_close_one_sentence_is(engine: Engine) -> None:
    """A relevant result under ``loose_match`` gets the loose-match line whatever its best sentence. A close sentence
    of the first papers (cosine 0.42 or more) used to spare it: on the read rounds that saved 4 answerable
    questions their caveat (this first one, read round 21, among them) and left 2 near-misses plain and 3 only
    caveated, which the line and the unknown-names refusal now flag and refuse (eval/results/ablation-final.md):
    the rule did not pay for itself and went. Read round 35's q5513, a near-miss (no abstract distils vision
    transformers) relevant by its sentence at 0.43 (``sentence_match``), was answered plainly."""
    s = engine.settings
    for q in (
        "Which papers distill large vision transformers into smaller student models?",
        "When an AI assistant tries to tailor its answer to someone it has never chatted with before, does that "
        "actually turn out better than just giving everyone the same answer?",
    ):
        result = engine.search(q)
        assert result.relevant and result.relevance < s.coverage.loose_match, result.relevance
        ans = engine.ask(q, ExtractiveBackend(s)).run()
        assert not ans.refused and LOOSE_MATCH in ans.uncovered and ans.caveat, (q, ans.uncovered)
    near = "Why do translation apps get idioms and slang so wrong?"
    result = engine.search(near)
    assert result.relevant and result.relevance < s.coverage.loose_match
    assert LOOSE_MATCH in engine.ask(near, ExtractiveBackend(s)).run().uncovered


@pytest.mark.parametrize(
    ("q", "said"),
    [
        # Read round 20: a likeness with another suffix ("MuZero-flavored").
        (
            "There was a MuZero-flavored method for games with hidden information that learns a coarse model of the "
            "game and searches with it at test time. What was it called again?",
            "MuZero",
        ),
    ],
)
def test_a_likeness_is_no_missing_aspect(engine: Engine, q: str, said: str) -> None:
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and not [u for u in ans.uncovered if said in u], ans.uncovered


def test_a_match_over_loose_match_is_answered_plainly(engine: Engine) -> None:
    """Read round 19: a lay paraphrase of the delayed-bandit paper (relevance 0.40) got the loose-match line at 0.42,
    one of its twelve caveated answerable questions (0.143). At 0.37 it is answered plainly, from the right paper."""
    q = (
        "Say a program keeps turning a dial that can sit at any position, and only finds out how good each position "
        "was after an unpredictable wait. Can it still learn almost as well as if it heard back instantly?"
    )
    result = engine.search(q)
    assert result.relevant and 0.37 <= result.relevance < 0.42, result.relevance
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and ans.uncovered == [], ans.uncovered
    assert ans.citations[:1] == [seed_id("Lipschitz bandit in the presence of stochastic delayed feedback")]


def test_a_lay_question_under_the_floor_passes_on_one_sentence(engine: Engine) -> None:
    """Blind writers asked what the persuasion paper finds in lay words in rounds 7, 10, 13 and 16, and each time it
    was refused: "chatbots" and "talking people into things" are unknown to the keyword index, so the hybrid
    relevance (0.32 to 0.34) fell under the floor, while a sentence of the paper matches the question closely. An
    everyday question in the same band matches no sentence that closely and is still refused."""
    s = engine.settings
    q = "How good are chatbots at talking people into things, and can even small ones be trained to get better at it?"
    result = engine.search(q)
    assert result.relevance < s.min_score and result.relevant, (result.relevance, result.sentence_match)
    assert result.sentence_match is not None and result.sentence_match >= s.sentence_match
    ans = engine.ask(q, ExtractiveBackend(s)).run()
    persuasion = seed_id("persuasive capabilities")
    assert not ans.refused and persuasion in ans.citations, (ans.refused, ans.citations)
    assert LOOSE_MATCH in ans.uncovered and ans.answer.startswith("The abstracts match this question only loosely")

    garden = engine.search("how should I design the layout of a small backyard garden?")
    assert s.sentence_match_from <= garden.relevance < s.min_score, garden.relevance
    assert not garden.relevant and garden.sentence_match is not None and garden.sentence_match < s.sentence_match
    off = Engine(s.model_copy(update={"sentence_match": 0.0}), engine.index)
    assert not off.search(q).relevant and off.search(q).sentence_match is None


def test_a_lay_question_whose_first_paper_is_right_is_answered(engine: Engine) -> None:
    """Rounds 5, 9, 10 and 11 each asked this in lay words and each was refused: STEDiff ranked first, well above
    the retrieval floor, but its best sentence's cosine (0.298) was under the quoting floor of 0.3."""
    q = "Can someone hide a secret trigger inside an AI picture generator, and how can it be caught?"
    ans = engine.ask(q, ExtractiveBackend(engine.settings)).run()
    stediff = seed_id("leveraging spatio-temporal features")
    assert not ans.refused and ans.citations[:1] == [stediff], (ans.refused, ans.citations)


def test_names_no_abstract_contains_are_said_first(engine: Engine) -> None:
    ans = engine.ask("what does DoRA report on GLUE?", ExtractiveBackend(engine.settings)).run()
    assert ans.uncovered[:2] == ["DoRA", "GLUE"] or ans.refused
    if not ans.refused:
        assert ans.answer.startswith("No indexed abstract mentions DoRA or GLUE")


def test_a_loose_match_on_names_no_abstract_has_is_refused(engine: Engine) -> None:
    """Read rounds 1 to 24: "what is a good strategy for winning at Monopoly?" and "learn a new language like
    Portuguese" passed the floor on their everyday words, only loosely, and were answered with the closest papers
    under the caveat. A loose match whose every name is in no indexed abstract is refused, and says why first; a
    question with a name some abstract has ("LoRA") is anchored in the corpus and still answered. (Issue 46 took the
    rule out on the read questions' flags, then put it back: it refuses what the loose line only caveats, 166 read
    near-misses, and two unrelated questions of rounds 1 to 3's test part, for 2 answerable questions refused.)"""
    s = engine.settings
    q = "How do I get better at chess openings like the Sicilian Defence?"
    result = engine.search(q)
    assert result.relevant and result.relevance < s.coverage.loose_match, result.relevance
    ans = engine.ask(q, ExtractiveBackend(s)).run()
    assert ans.refused and ans.citations == [] and ans.uncovered == ["Sicilian Defence", LOOSE_MATCH], ans.uncovered
    assert ans.answer.startswith(
        "No indexed abstract mentions Sicilian Defence, and the abstracts match the question only loosely. "
    ), ans.answer
    # Any backend: decided before a model is asked.
    fake = FakeBackend()
    assert engine.ask(q, fake).run().refused and fake.calls == []
    # One name the abstracts have: answered, with the unknown one said first (loose by its relevance).
    anchored = engine.ask("Does the LoRA alternative with the Hadamard product beat QLoRA?", ExtractiveBackend(s))
    kept = anchored.run()
    assert not kept.refused and kept.uncovered == ["QLoRA", LOOSE_MATCH], kept.uncovered
    assert kept.answer.startswith("No indexed abstract mentions QLoRA, and the abstracts match the question only")
    # A clear match is not touched: the same names, no loose line (and the everyday rule, which refuses this
    # question too, off).
    off = Engine(with_coverage(s, loose_match=0.0, everyday_margin=0.0), engine.index)
    plain = off.ask(q, ExtractiveBackend(off.settings)).run()
    assert not plain.refused and plain.uncovered == ["Sicilian Defence"], plain.uncovered


# Everyday questions that share one ordinary word with an abstract (read rounds 1 and 33: a board game and the
# game-theory paper, memory for names and associative memory); and answerable ones nearest them in the read rounds.
EVERYDAY = [
    "What is a good board game for a family of five with young kids?",
    "How can I improve my memory for people's names at parties?",
    "Which board game is good for a family game night with young children?",
]
NEAR_EVERYDAY = [
    "Which papers model strategic interaction between several players using game theory?",
    "Which papers involve games or game theory?",
    "If I give a chatbot a long list of who likes what and then ask about one of them, how does it find the answer?",
]


@pytest.mark.parametrize("question", EVERYDAY)
def test_an_everyday_question_that_shares_a_word_with_an_abstract_is_refused(engine: Engine, question: str) -> None:
    """Relevance passed the floor on one everyday word ("game", "memory") and the closest paper was quoted. The
    question stands nearer an everyday question (``rag_papers/words/everyday.txt``) than any abstract by more than
    ``coverage.everyday_margin``: refused before any model is asked, and the answer says why."""
    s = engine.settings
    assert engine.search(question).relevant  # the floor alone lets it through
    fake = FakeBackend()
    ans = engine.ask(question, fake).run()
    assert ans.refused and ans.citations == [] and fake.calls == [], ans.answer
    assert "everyday" in ans.answer, ans.answer
    off = Engine(with_coverage(s, everyday_margin=0.0), engine.index)
    assert not off.ask(question, ExtractiveBackend(s)).run().refused


@pytest.mark.parametrize("question", NEAR_EVERYDAY)
def test_a_research_question_in_everyday_words_is_still_answered(engine: Engine, question: str) -> None:
    ans = engine.ask(question, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and ans.citations, ans.answer


def test_a_training_detail_the_abstract_never_states_is_said_missing(engine: Engine) -> None:
    """Near-misses about a paper the index holds ask for what abstracts seldom state (GPUs, learning rates):
    the answer quotes the paper and says first that its abstract does not give them."""
    ans = engine.ask("How many GPUs did the ABBA experiments need?", ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and ans.citations[:1] == [abba_id()]
    assert SETUP in ans.uncovered and ans.answer.startswith(f"The abstracts don't mention {SETUP}")


def test_a_dataset_question_is_not_answered_by_the_papers_own_name_or_a_field_acronym(engine: Engine) -> None:
    """Before, any word with two capitals stated a dataset: "Which dataset is DirMoE trained and evaluated on?"
    was answered plainly, its "dataset" covered by "Mixture-of-Experts (MoE) models ...". An abstract that names
    no dataset is now said to lack one."""
    ans = engine.ask("Which dataset is DirMoE trained and evaluated on?", ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and ans.citations[:1] == [seed_id("DirMoE")]
    assert DATA in ans.uncovered and ans.answer.startswith(f"The abstracts don't mention {DATA}")


@pytest.mark.parametrize(
    ("question", "missing"),
    [
        ("which imperfect information games was LAMIR tested on?", NAMED),
        ("What confidence threshold does the early-exit chain-of-thought truncation method use?", FIGURES),
        (
            "What are the limitations of the continuous submanifold field embedding for 3D Gaussian Splatting?",
            "limitations",
        ),
        (
            "Were any of the RNAs from the RoseTTAFold2NA-based dual diffusion model validated in the wet lab?",
            VALIDATION,
        ),
        ("Why does Decision Transformer struggle to stitch together suboptimal trajectories?", "Decision Transformer"),
        ("What regret bound does LAMIR achieve?", "regret bound"),
        (
            "Has anyone combined Dirichlet-style mixture-of-experts routing with diffusion language models to cut "
            "inference cost?",
            "Dirichlet-style mixture-of-experts routing together with diffusion language models",
        ),
        (
            "Does AtteNT also speed up training of convolutional networks or graph neural networks?",
            "convolutional networks or graph neural networks",
        ),
        # Training details of the paper asked about, not of another quoted paper that mentions GPUs.
        ("How many GPU hours did it take to train the models used to test the Bayesian Attention Mechanism?", SETUP),
        ("How much GPU memory does ABBA need during training compared with LoRA?", SETUP),
        ("Is there a formal proof that Smooth-Leaky activations prevent plasticity loss?", PROOF),
        ("Has the pay-what-you-contribute federated learning mechanism been tried with real hospitals?", VALIDATION),
        # Read round 12: code asked for, a user study, "plugs X into Y".
        ("Is the code for the FlashLLA kernel from the Local Linear Attention paper publicly released?", CODE),
        ("Did the CreatiDesign authors run a user study with professional graphic designers?", VALIDATION),
        ("How robust is IG-FWI when the recorded seismic data are contaminated with strong noise?", "strong noise"),
        (
            "Is there work that plugs Dirichlet-based mixture-of-experts routing into diffusion language models?",
            "Dirichlet-based mixture-of-experts routing together with diffusion language models",
        ),
    ],
)
def test_an_absent_facet_of_a_paper_the_index_holds_is_said_missing(
    engine: Engine, question: str, missing: str
) -> None:
    """Round 4 and 5's near-misses of this kind were answered plainly (4 of 22 flagged in round 5): the games were
    "stated" by "While MuZero enables ...", the threshold by the "1" of "o1-like", the limitations by a sentence on
    what earlier methods fail to do, and the scope by words spread over two papers. Rounds 8 to 11 (read): the GPU
    hours of BAM were "stated" by another quoted paper's GPUs, a run's cost compared with another paper's was read
    as a plain comparison, and a formal proof or a trial with real hospitals had no facet."""
    ans = engine.ask(question, ExtractiveBackend(engine.settings)).run()
    assert not ans.refused and missing in ans.uncovered, ans.uncovered
    assert ans.answer.startswith(f"The abstracts don't mention {missing}")


@pytest.mark.parametrize(
    ("sentence", "states"),
    [
        ("On GSM8K and MATH, accuracy rises by 4 points.", True),  # names with a digit, or capitals inside
        ("We evaluate on ImageNet.", True),
        ("Our judge agrees with humans on MT-Bench.", True),
        ("We release a suite of 35 tasks.", True),  # said in words
        ("Mixture-of-Experts (MoE) models route tokens.", False),  # capitals only at the start of each part
        ("We propose DirMoE, a Dirichlet router.", False),  # the question's own name is no dataset of it
        ("Autoregressive models (ARMs) dominate LLMs.", False),  # an abbreviation defined, a field acronym
    ],
)
def test_what_states_a_dataset(sentence: str, states: bool) -> None:
    test = states_facet("Which dataset is DirMoE evaluated on?", DATA, ["DirMoE"])
    assert test(sentence) is states


def test_a_training_detail_is_stated_only_by_the_part_asked() -> None:
    """Asked for GPUs, a learning rate is no answer, nor is "scheduled" a schedule."""
    gpus = states_facet("How many GPUs were used to train CreatiDesign?", SETUP, ["CreatiDesign"])
    assert gpus("Training took 3 days on 8 A100 GPUs.") and not gpus("We use a learning rate of 1e-4.")
    hyper = states_facet("What learning rate schedule does AtteNT use?", SETUP, ["AtteNT"])
    assert hyper("with a cosine learning rate schedule") and not hyper("over carefully scheduled intervals")
    memory = states_facet("How much memory does ABBA need?", SETUP, ["ABBA"])
    assert memory("It cuts the memory footprint by half.") and not memory("It trains 3 times faster.")


def test_a_description_is_never_said_missing_a_name_still_is(engine: Engine) -> None:
    """A paraphrase of an abstract in other words gets no line, nor does a technical term the whole index lacks
    ("speculative decoding": the description rule went, eval/results/ablation.md); a name no abstract has does."""
    extractive = ExtractiveBackend(engine.settings)
    q = "one answer does not fit all: testing whether chatbots adjust how they explain things to each individual's "
    para = engine.ask(q + "background", extractive).run()
    assert not para.refused and para.uncovered == [], para.uncovered
    term = engine.ask("which papers use speculative decoding to speed up LLM inference?", extractive).run()
    assert "speculative decoding" not in term.uncovered
    named = engine.ask("which papers evaluate their method on GLUE?", extractive).run()
    assert "GLUE" in named.uncovered or named.refused


@pytest.mark.parametrize(
    "q",
    [
        "what does ABBA claim?",
        "How does SWAX compare with FlashLLA?",
        # Read rounds 4 to 11, each caveated before: a training time cut by a share, a figure remembered roughly
        # (the abstract says 16.8x), "GNNs" of an abstract that defines "(TGNN)", a downside stated as "the issue
        # with small sliding windows is that they are detrimental", data described by where it lies.
        "the paper that cut transformer training time by roughly 13% for LLMs and ~20% for vision transformers",
        "training-free acceleration for LLaDA and Dream, up to roughly 16x faster if I remember right?",
        "the paper that extends influence maximization with time decay to explain temporal GNNs",
        "the xLSTM + sliding-window attention hybrid paper... what was the downside of using really short windows?",
        "the paper that studies diffusion models trained on data lying uniformly on a one-dimensional subspace",
        # Read round 12: a head asked of a list of papers ("papers focus"), "timesteps" of an abstract that writes
        # "time steps", a British spelling, and a context length asked as a result, not a training setting.
        "Which papers focus on activation functions, such as ReLU or leaky variants, and how they shape training?",
        "I think someone built a detector for backdoored diffusion models that looks for abnormal gradient build-up in "
        "the weights and anisotropy across timesteps? What detection rate did it reach?",
        "When a seismic velocity model is parameterised by a neural field that maps spatial positions to values, why "
        "does the inversion depend less on the starting guess?",
        "The paper that treats positional encoding as a prior inside a probabilistic model of attention: how far "
        "beyond the training context length could its models still retrieve information accurately?",
    ],
)
def test_a_question_the_abstract_answers_gets_no_line(engine: Engine, q: str) -> None:
    """The aspects' rules alone (``loose_match`` off: a half-remembered question can match only loosely, and that
    line is tested on its own)."""
    rules_only = Engine(with_coverage(engine.settings, loose_match=0.0), engine.index)
    ans = rules_only.ask(q, ExtractiveBackend(rules_only.settings)).run()
    assert ans.uncovered == [] and ans.caveat is None and not ans.refused, (q, ans.uncovered)


def test_a_figure_is_found_by_its_value_and_roughly_when_remembered_roughly() -> None:
    """The whole part as before ("16x" is the 16.8x an abstract gives); another number only when the question
    remembers it roughly, within ``ROUGH_FIGURE``."""
    src = [("ES-dLLM", "It delivers 5.6$\\times$ to 16.8$\\times$ speedup and up to 1.85$\\times$ over caching.")]
    toks = [set(paper_text(t, a).split()) for t, a in src]
    assert name_found("16x", src, toks, "Is ES-dLLM 16x faster?") == [1]
    assert name_found("1.85x", src, toks, "Is it 1.85x faster than caching?") == [1]
    assert name_found("17x", src, toks, "Is ES-dLLM 17x faster?") == []
    assert name_found("17x", src, toks, "Is ES-dLLM roughly 17x faster?") == [1]
    assert name_found("30x", src, toks, "Is ES-dLLM roughly 30x faster?") == []


def test_an_acronym_is_found_in_an_abstract_defining_a_kind_of_it() -> None:
    src = [("TemGX", "Temporal graph neural networks (TGNN) extend graph neural networks to time.")]
    toks = [set(paper_text(t, a).split()) for t, a in src]
    assert name_found("GNNs", src, toks, "How are temporal GNNs explained?") == [1]
    assert name_found("TGN", src, toks, "Does TGN use memory modules?") == []  # "(TGNN)" starts with it: no kind


def test_a_versioned_model_and_a_spelt_out_acronym_are_found() -> None:
    """Read round 21: "Qwen" of an abstract that names "Qwen2.5-7B", and "Dirichlet VAE" of one that says "Dirichlet
    variational autoencoder", were said missing."""
    src = [
        ("Judges", "Results with Llama-3-8B-Instruct and Qwen2.5-7B show gains."),
        ("DirMoE", "A routing mechanism built on a Dirichlet variational autoencoder framework."),
    ]
    toks = [set(paper_text(t, a).split()) for t, a in src]
    assert name_found("Qwen", src, toks, "Which papers use Qwen?") == [1]
    assert name_found("Dirichlet VAE", src, toks, "What does the Dirichlet VAE router do?") == [2]
    assert name_found("VAE", src, toks, "Which papers use a VAE?") == [2]
    # Not a shorter name, nor the initials of words that run across a sentence or take in a stop word.
    assert name_found("Qwe", src, toks, "Does Qwe help?") == []
    assert name_found("GAN", src, toks, "Which papers use a GAN?") == []
    other = [("X", "We vary an encoder. Results vary. Adding encoders helps.")]
    assert name_found("VAE", other, [set(paper_text(*other[0]).split())], "a VAE?") == []


def test_ask_json_and_the_cli_carry_the_uncovered_line(seeded: Settings) -> None:
    env = {"RAG_PAPERS_HOME": str(seeded.home)}
    res = run_main("ask", "--json", "--llm", "extractive", "what does DoRA report on GLUE?", env=env)
    assert res.returncode == 0, res.stderr
    obj = json.loads(res.stdout)
    assert "uncovered" in obj and obj["uncovered"][:2] == ["DoRA", "GLUE"]
    res = run_main("ask", "--llm", "extractive", "what does DoRA report on GLUE?", env=env)
    assert res.returncode == 0 and res.stdout.startswith("No indexed abstract mentions DoRA or GLUE"), res.stdout


# ------------------------------------------------------------------ LLM rewrites and LLM answers
@pytest.mark.parametrize(
    "junk",
    [
        "The answer - ABBA reparameterizes the update as a Hadamard product.",
        "User: how does it compare to LoRA?\nAssistant: ABBA is better.",
        "Rewrite the follow-up question as one standalone question that can be understood without the conversation.",
        "Standalone question: " + " ".join(["what"] * 5 + ["about", "the", "weather", "forecasting"] * 6),
        "What is the best recipe for sourdough bread?",
        "Sure! Here is the question: what are ABBA's limitations?",
    ],
)
def test_an_llm_rewrite_that_is_junk_is_rejected(junk: str) -> None:
    conversation = 'what does ABBA claim? "ABBA: Hadamard product, PEFT architecture"'
    assert usable_rewrite(junk, "how does it compare to LoRA?", conversation) is None


def test_a_good_llm_rewrite_is_kept() -> None:
    conversation = 'what does ABBA claim? "ABBA: Hadamard product, PEFT architecture"'
    good = "How does ABBA compare to LoRA?"
    assert usable_rewrite(good, "how does it compare to LoRA?", conversation) == good


class JunkRewriter(BackendDefaults):
    """A backend that answers every rewrite with junk and counts its calls (the real check is usable_rewrite's)."""

    extractive = False
    name = "junk"
    model = "junk-1"
    context_window = 4096

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.calls = 0

    def available(self) -> tuple[bool, str]:
        return True, ""

    def stream(self, messages: list[Any], max_tokens: int) -> Iterator[str]:
        self.calls += 1
        yield self.reply


def test_a_junk_rewrite_falls_back_to_the_rule_based_one(engine: Engine) -> None:
    """Reported with llama.cpp: "Searched for" showed "The answer -", a "User: ..." line, the prompt itself."""
    chat = ChatSession(engine)
    chat.ask("what does ABBA claim?", ExtractiveBackend(engine.settings))[1].run()
    for junk in ("The answer -", "User: what does ABBA claim?", "Rewrite the follow-up question as one standalone"):
        backend = JunkRewriter(junk)
        standalone = chat.condense("how does it compare to LoRA?", backend)  # type: ignore[arg-type]
        assert backend.calls == 1
        assert "ABBA" in standalone and junk not in standalone


@pytest.mark.slow
def test_the_demo_model_never_rewrites_follow_ups(engine: Engine) -> None:
    """The packaged SmolLM2, in a real run: the follow-up is searched by the rule-based rewrite, and the
    answer cites ABBA, not a paper found by a junk rewrite. What the model writes is not what is tested: its answers
    are cut short (``demo_answer_tokens``), each a real generation all the same."""
    from rag_papers.llm import LlamaCppBackend

    engine.settings.demo_answer_tokens = 16  # the least it takes
    backend = LlamaCppBackend(engine.settings)
    assert backend.demo
    chat = ChatSession(engine)
    chat.ask("what does ABBA claim?", ExtractiveBackend(engine.settings))[1].run()
    for follow in ("how does it compare to LoRA?", "and what about its limitations?", "why is that?"):
        standalone, stream = chat.ask(follow, backend)
        assert standalone.startswith(follow) and "ABBA" in standalone, standalone
        ans = stream.run()
        assert ans.search is not None and ans.search["results"][0]["id"] == abba_id()


def test_an_llm_answer_says_what_the_abstracts_leave_out(engine: Engine) -> None:
    """The prompt asks the model to name what the abstracts don't answer; that line fills ``uncovered`` (and
    the caveat the CLI and the UI show) and is taken out of the answer, so it is no claim."""
    from ollama_stub import OllamaStub

    from rag_papers.llm import OllamaBackend
    from rag_papers.prompting import load_prompt

    reply = "ABBA reparameterizes the update as a Hadamard product [1].\nNot in the abstracts: training cost."
    with OllamaStub(models=["llama3.2:3b"], reply=reply) as stub:
        engine.settings.ollama_host = stub.url
        backend = OllamaBackend(engine.settings)
        ans = engine.ask("what does ABBA claim, and what does it cost to train?", backend).run()
        prompt = json.dumps([body for _, body in stub.requests])
    assert "Not in the abstracts" in load_prompt(engine.settings, "answer_system") and "Not in the abstracts" in prompt
    assert ans.uncovered == ["training cost"]
    assert ans.caveat == "The abstracts don't answer training cost"
    assert "Not in the abstracts" not in ans.answer
    assert all("Not in the abstracts" not in c.text for c in ans.claims)
    assert ans.citations == [abba_id()] and not ans.refused
