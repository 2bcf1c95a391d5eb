"""The ``natural`` workload: everyday requests in natural, non-repetitive English, each asking for new text.

The prompts below were written for infkit (Apache-2.0 with the rest of the kit; no dataset is
downloaded): 32 distinct requests on unrelated topics, two or three sentences each, none quoting
another and none asking for a copy, a list or a repetition, so a good answer is new prose. A run
draws ``--requests`` of them without replacement, in an order drawn from the content seed; the
input length of each request is its text's own token count (``--input-tokens`` is not used) and
``--output-tokens`` is the cap (``max_tokens``): served with end-of-sequence allowed, an answer
ends where the model ends it. This is the negative control of prompt lookup (bench-68): its
answers give n-gram matching nothing to copy, where ``copy`` gives it everything.
"""

from __future__ import annotations

import random
from typing import Any

from harness.errors import InvalidInput
from harness.workload.generators import Common, register_generator
from harness.workload.model import Request
from harness.workload.tokens import ExactTokenizer

PROMPTS = (
    "I just moved into an apartment whose balcony gets sun only in the morning. Which vegetables or herbs would "
    "grow well there, and how often should I water them in early summer?",
    "My grandmother kept a sourdough starter for forty years, and I inherited it last week. What should I feed "
    "it, and how can I tell whether it is still healthy?",
    "Explain to a twelve-year-old why the sky turns orange and red at sunset but looks blue at noon.",
    "I am preparing for my first job interview at a small architecture firm. What kind of questions might they "
    "ask a junior designer, and how should I talk about my student projects?",
    "A friend says that lightning never strikes the same place twice. Is that true, and where does the saying "
    "come from?",
    "Our school is planning a trip to a coastal marsh in autumn. What birds might the children see there, and "
    "what should they bring to stay warm and dry?",
    "Why do old books smell the way they do? I noticed it in the library yesterday and keep wondering about it.",
    "I run a tiny bakery and want to cut down on food waste at the end of each day. Can you suggest a few "
    "practical ideas that would not cost much to try?",
    "How did people navigate across open ocean before satellites and radio? I am curious about the methods "
    "sailors used centuries ago.",
    "My cat has started knocking glasses off the kitchen table every morning. What might be behind this "
    "behaviour, and how can I discourage it gently?",
    "Describe what a typical day might have looked like for a lighthouse keeper on a remote island in the "
    "nineteenth century.",
    "I want to start running, but my knees ache after even short distances. How should a beginner build up "
    "slowly without getting hurt?",
    "What makes a bridge able to carry heavy trucks without bending? Please keep the explanation simple and "
    "concrete.",
    "Next month I am hosting a dinner for eight people, two of whom are vegetarian. Could you suggest a warm "
    "main course that everyone at the table would enjoy?",
    "Why do we get goosebumps when we are cold or when we hear a moving piece of music?",
    "I found a small beetle with a shiny green shell in my garden this morning. How can I find out what kind it "
    "is, and should I be worried about my roses?",
    "Tell me a short story about a clockmaker who discovers that one of her clocks runs backwards.",
    "How do bees decide where to build a new hive when a colony splits in spring?",
    "My teenage son wants to learn to cook but finds recipes boring. What is a good first dish that teaches "
    "several useful skills at once?",
    "What is the difference between weather and climate? I keep hearing the two words used as if they meant "
    "the same thing.",
    "I am writing a letter to thank a retired teacher who changed my life twenty years ago. How might I begin "
    "it so that it sounds sincere rather than formal?",
    "Why does bread go stale faster in the refrigerator than on the counter?",
    "Imagine a small mountain village the week before its first winter snowfall. Describe the sounds and smells "
    "of its market square.",
    "How do noise-cancelling headphones make a loud train carriage seem quiet?",
    "Our neighbourhood wants to turn an empty parking lot into a community garden. What should we think about "
    "before we ask the city for permission?",
    "What did ancient Romans usually eat for breakfast, and how was it different from what they ate in the "
    "evening?",
    "I keep putting off a difficult conversation with my business partner about money. How can I prepare so "
    "that it goes calmly?",
    "Why do some rivers wind back and forth in wide loops instead of running straight downhill?",
    "Explain how a vaccine teaches the body to recognise an illness it has never met before.",
    "I inherited an old film camera from my uncle. What should I check before I buy film and try taking "
    "pictures with it?",
    "Write a brief, friendly note to a new neighbour inviting them to tea on Saturday afternoon.",
    "How do ice skaters spin so quickly without getting dizzy, and what happens when they pull their arms in?",
)


def _count(common: Common, opts: dict[str, Any] | None = None) -> int:
    n = common.requests
    if n is None or not 1 <= n <= len(PROMPTS):
        raise InvalidInput(f"--requests {n}: the natural workload has {len(PROMPTS)} distinct prompts; "
                           f"ask for 1 to {len(PROMPTS)}")
    return n


@register_generator("natural", count=_count,
                    help=f"natural-text requests ({len(PROMPTS)} distinct, written for infkit) asking for new prose; "
                         "input lengths are the texts' own, --output-tokens is a cap (serve with EOS allowed)")
def _natural(common: Common, opts: dict[str, Any], tok: ExactTokenizer) -> tuple[list[Request], None]:
    n = _count(common)
    order = list(range(len(PROMPTS)))
    random.Random(f"{common.seed_for('content')}:natural").shuffle(order)
    return [Request(index=i, input_tokens=tok.count(PROMPTS[k]), output_tokens=common.output_tokens,
                    prompt=PROMPTS[k]) for i, k in enumerate(order[:n])], None
