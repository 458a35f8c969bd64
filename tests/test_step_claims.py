"""Claims read from free-form steps: prose, LaTeX, units, percentages, symbolic rewrites and
derived equations; and the classes of writing that look false but are not (no false alarm)."""

from __future__ import annotations

import pytest

from rewards.claims.equations import common_root, follows, polynomial
from rewards.claims.identities import degree, identity, proportional
from rewards.claims.judge import claims_of, moduli
from rewards.claims.latex_text import rewrite


def verdicts(step: str) -> list[bool]:
    return [c.ok for c in claims_of(step)]


@pytest.mark.parametrize("step", [
    r"Since there were 18 flamingos, \(1/3 \times 18 = 6\) flamingos are taken back.",
    r"So, they have \(18 - 6 = 12\) flamingos left.",
    r"$\frac{3}{4}\cdot 8 = 6$",
    "20% of $24 = 0.20 × $24 = $4.80.",
    "9 hours * 60 minutes/hour = 540 minutes",
    "3 days * 1 hour/day = 3 hours",
    "10 (initially infected) * 6 (infections per person) = 60",
    r"\[ \binom{9}{3} = \frac{9!}{3!6!} = \frac{9 \times 8 \times 7}{3 \times 2 \times 1} = 84 \]",
    "3 times 4 = 12", "5 x 3 = 15", "0.25 × 100 = 25%", "25% + 5% = 30%",
    r"$V = \pi (1.5)^2 (6) \approx 42.41$",
    r"$\sqrt{8} = 2\sqrt{2}$", "4√3 / 6√3 = 2/3", r"$2\frac{1}{2} \cdot 2 = 5$",
    "The total is $350 000 + $17500 = $367 500.",
    "Thus, W = 1 1/2 / 1/2 = 3 episodes.",
    "10/3 = <<10/3=3.33>>3.33",
    r"\begin{align*} 1061 &= 1000 + 61 \\ &= 1061 \end{align*}",
])
def test_true_claims_are_read_and_hold(step):
    found = verdicts(step)
    assert found and all(found), (step, [c.text for c in claims_of(step)])


@pytest.mark.parametrize("step", [
    "<<50%=50>>", "half of 48 = 30", "2+2=5!", "2 + 2 = 5apples",
    r"\[\frac{33 \div 33}{663 \div 33} = \frac{1}{21}\]",
    r"\( n = 1 \cdot 3^3 + 2 \cdot 3^2 + 2 \cdot 3^1 + 2 \cdot 3^0 = 81 + 18 + 6 + 2 = 107 \)",
    "V_PJ = π(1.5)²(6) = approximately 40.71 cubic inches.",
    "Total earnings = $3.00 (dishwasher) + $3.00 (laundry) + $1.50 (trash) + $1.50 (room). "
    "Total earnings = $8.00.",
    "10/3 = 3.34", r"$5^8 \approx 10^8$", "Step 2: 7 * 2 = 15",
    r"$y = (x+1)^2 = x^2 + x + 1$",
    r"Subtracting \( 3x \) from both sides, we have \( x^2 - 3x = 1 \). Factoring the left-hand "
    r"side, we have \( (x - 1)(x - 3) = 0 \).",
    "we can write an equation: 0.99B + 1.01B + B = 4500. Combine like terms: 3.01B = 4500.",
])
def test_false_claims_are_refuted(step):
    assert False in verdicts(step), (step, [c.text for c in claims_of(step)])


@pytest.mark.parametrize("step", [
    # integer division with a remainder written as an equation
    "21 ÷ 14 = 1 remainder 7", r"$1000 \div 9 = 111$ remainder 1",
    r"\( \frac{36}{5} = 7 \) full pens (with a remainder of 1)", r"\[500 \div 13=13 \cdot 38+6.\]",
    # a variable after a space, absolute values, derivatives, cancelled factors
    r"\(16 = 13 - 12 \cos C\)", r"$|-5| + 2 = 7$", r"$f''(-4) = 12 - 2 = 10$",
    r"$\frac{\cancel{3} \cdot 2}{\cancel{3}} = 2 + 1$",
    # modular arithmetic, defined operations, names and labels that hold numbers
    r"The units digit is found from $7 \cdot 3 = 1$.", "0+0=0, 0+1=1, and 1+1=0 by parity",
    r"$3*2=3^2+3\cdot 2-2^2=11$", r"$6\& 3 = (6 + 3)(6-3) = 27$", "a $6-8-10 = 3-4-5$ triangle",
    "Time to heat up to 400 degrees = 20 + 8 = 28 minutes.", "New position: 1st - 5 = 6th",
    # a test the text rejects, unit conversions, products of placeholders, bases
    r"\[ 2 \cdot 1^3 + 2^3 = 1^4 \cdot 2^2 \implies 2 + 8 = 4 \implies 10 = 4, \] which is false.",
    r"\[\frac{9 \pi}{4} = \frac{180^\circ}{\pi} \cdot \frac{9 \pi}{4} = 405^\circ.\]",
    r"$\frac{1}{2}(\text{base})(\text{height})=\frac{1}{2}(7)(5)=17.5$",
    r"$2x\sqrt{3}=10\sqrt{2}$", r"$DF = 2 QD = 8\sqrt{13}$", r"$a\sqrt{2}=\sqrt{98}$",
    # equalities of conditions, lists, substitutions and cases
    r"$x = a^2 - bc = b^2 - ac$", r"$\frac 26, \frac 28 = \frac 13, \frac 14$",
    r"$x^3 = x(2x+1) = 2x^2 + x = 2(2x+1) + x = 5x + 2$",
    r"so $x - 3 = 0$ or $x + 3 = 0$, so $x = 3$ or $x = -3$.",
    "If x = 3, then ... If x = 1, then the sum is 4.",
    "1/3 = 0.33, so 0.33 × 600 = 200", "Since 48 = 100% + 20% = 120% of the actual number",
    "In 3 hours, there are 3 x 4 = 12 (15 minutes).", r"$\#(\#(\#50)) = \#(\#(26)) = 8$",
    r"$0.\overline{7}\cdot 10 = 7.\overline{7}$", r"$3!! + 1!! = 3 \cdot 1 + 1 = 4$",
])
def test_writing_that_only_looks_false_is_not_flagged(step):
    assert False not in verdicts(step), (step, [c.text for c in claims_of(step) if not c.ok])


@pytest.mark.parametrize("step,expected", [
    (r"Solving \(2x + 3 = 7\), we get \(x = 2\).", [True]),
    (r"\(x^2 = 4\), so \(x = 2\) or \(x = -2\).", [True]),
    ("0.457x = 21, so x = 45.95", [True]),  # a decimal root, rounded
    (r"$y = (x+1)^2 = x^2 + 2x + 1$", [True]),
    (r"$(x+1)^2 = x^2 + 2x + 3$", []),  # two sides alone may be an equation: not judged
])
def test_symbolic_steps(step, expected):
    assert verdicts(step) == expected


def test_identity_and_equation_helpers():
    assert identity("(x + 1) ^ 2", "x ^ 2 + 2 x + 1") is True
    assert identity("(x - 20) ^ 2", "x ^ 2 - 60 x + 400") is False
    assert identity("e ^ x", "e x") is None and identity("2", "3") is None  # constants only
    assert proportional("4 t ^ 2 - 20 t + 9", "- 16 t ^ 2 + 80 t - 36") is True
    assert degree("x ^ 3 + 1") == pytest.approx(3, abs=0.05)
    assert polynomial("x ^ 2 - 3 x", "1", "x") == [-1, -3, 1]
    assert polynomial("1 / x", "2", "x") is None and polynomial("x ^ 12", "1", "x") is None
    assert common_root([-2, 1], [4, 0, -1]) and not common_root([-1, 1], [4, 0, -1])
    assert follows(("2 x + 3", "7"), ("x", "2"), "x") is True
    assert follows(("x ^ 2 - 3 x", "1"), ("(x - 1) (x - 3)", "0"), "x") is False


def test_moduli_read_from_the_step():
    assert moduli(r"so $4^6 \equiv 21 \pmod{25}$ and the units digit") == (10, 25)
    assert moduli("the remainder when divided by 7 is 3") == (7,)
    assert moduli("no modular words here") == ()


def test_rewrite_marks_math_variables_and_junk():
    out = rewrite(r"so $2x + \cos y = \frac{1}{2}$ and 3 cups")
    assert "ⓥx" in out and "§" in out and "((1)/(2))" in out and "3 cups" in out
    assert "§" in rewrite(r"\cancel{3}") and rewrite("a\\") .endswith("§")
