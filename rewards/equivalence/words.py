"""Words that change what a number in an answer says: negations, hedges, comparisons, and the
words that after an answer make it one of several or a different quantity ("18 or more").

Read by the answer reader (`rewards.answers.span`: a statement with them states no single answer)
and by the normaliser (`rewards.equivalence.normalize`: they are never a unit to drop).
"""

NEGATION = {"not", "no", "never", "isn't", "wasn't", "aren't", "isnt", "cannot", "can't", "won't",
            "neither", "nor", "doesn't", "don't", "shouldn't", "wouldn't", "couldn't", "non"}
HEDGES = {"maybe", "perhaps", "possibly", "probably", "might", "could", "either", "guess",
          "unsure", "uncertain", "likely", "unlikely", "assuming", "suppose", "supposing"}
COMPARISON = {"least", "most", "more", "less", "fewer", "greater", "smaller", "larger", "over",
              "under", "above", "below", "between", "nearly", "almost", "than", "exceeds",
              "exceed", "upto", "within", "except", "excluding"}
# Nouns and adverbs that scale or offset a count ("9 score" is 180, "9 thirds" is 3, "9 extra" is 9
# more than something): a closed class of the language, listed whole, unlike units or remarks. Never
# a unit to drop (`\boxed{9 \text{ score}}` is not 9); "pairs" stays a unit: "18 pairs" answers "how
# many pairs" (tests/test_rewards_lenient_readings.py).
MULTIPLIERS = {"score", "gross", "brace", "myriad", "lakh", "crore", "double", "triple",
               "quadruple", "twice", "thrice", "fold", "third", "fourth", "fifth", "sixth", "seventh",
               "eighth", "ninth", "extra", "additional", "another", "googol"}
# after the answer, these make it one of several or a different quantity ("18 or more")
AFTER_BAD = (NEGATION | HEDGES | {
    "or", "if", "unless", "otherwise", "depending", "plus", "minus", "times", "divided", "than",
    "least", "most", "nearly", "almost", "wrong", "incorrect", "false", "instead", "rather",
    "hundred", "thousand", "million", "billion", "trillion", "dozen", "half", "quarter", "base",
    "mod", "modulo", "percent", "squared", "cubed"})
