"""One tiny program of the positive-control world and three responses to it, shared by the
tests of the rule-aware oracle and of the localization study's controls."""

from rredcot.data.misconceptions import Misconception
from rredcot.data.programs import Program, Step

RULE = Misconception(rule="smaller_from_larger", rate=0.8)
# d = a − b = 1 − 2: the rule applies (it writes 2 − 1 = 1, right is 9); e = d + c: it does not
PROGRAM = Program(
    10, (("a", 1), ("b", 2), ("c", 4)), (Step("d", "a", "-", "b"), Step("e", "d", "+", "c"))
)
RIGHT = "d=a-b=1-2=9\ne=d+c=9+4=3\nAnswer: 3."
SYSTEMATIC = "d=a-b=1-2=1\ne=d+c=1+4=5\nAnswer: 5."  # the misconception's value at line 1
SLIP = "d=a-b=1-2=9\ne=d+c=9+4=4\nAnswer: 4."  # a random slip at line 2
