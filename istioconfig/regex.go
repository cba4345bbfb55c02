package istioconfig

import (
	"fmt"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// RegexProgramLimit is the RE2 program size above which Envoy refuses a
// regex: meshfed's Envoy bootstrap sets re2.max_program_size.error_level
// to it, as Istio's does (Envoy's own default is 100, which refuses most
// useful regexes; a bootstrap not made by meshfed or Istio should set it
// too). grpc-go compiles regexes with Go's regexp, which has no such
// limit.
const RegexProgramLimit = 32768

// maxRegexCost bounds regexProgramCost: half of RegexProgramLimit, as
// margin for the difference between Go's program and RE2's.
const maxRegexCost = RegexProgramLimit / 2

// checkRegex reports whether re is a regex every client accepts: valid
// RE2 syntax (Go's regexp implements RE2's), and a program small enough
// for Envoy (RegexProgramLimit).
func checkRegex(re string) error {
	if _, err := regexp.Compile(re); err != nil {
		return err
	}
	cost, err := regexProgramCost(re)
	if err != nil {
		return err
	}
	if cost > maxRegexCost {
		return fmt.Errorf("too large: its compiled program is about %d instructions, the limit is %d (Envoy refuses regexes whose RE2 program exceeds %d)", cost, maxRegexCost, RegexProgramLimit)
	}
	return nil
}

// regexProgramCost estimates the size of re's RE2 program, which Envoy
// compares with re2.max_program_size. It is a proxy, not RE2's own count:
// Go's regexp/syntax compiles (after Simplify, which expands counted
// repetitions as RE2 does) to a program of the same structure as RE2's,
// except that RE2 matches UTF-8 bytes, so a character class costs about
// one instruction per range and UTF-8 length, and "any character" several.
func regexProgramCost(re string) (int, error) {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0, err
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0, err
	}
	cost := 0
	for _, in := range prog.Inst {
		switch in.Op {
		case syntax.InstRune:
			c := 0
			for i := 0; i+1 < len(in.Rune); i += 2 {
				c += utf8.RuneLen(min(in.Rune[i+1], utf8.MaxRune))
			}
			if len(in.Rune) == 1 {
				c = utf8.RuneLen(in.Rune[0])
			}
			cost += max(c, 1)
		case syntax.InstRuneAny, syntax.InstRuneAnyNotNL:
			cost += 8 // the UTF-8 sequences of any code point
		default:
			cost++
		}
	}
	return cost, nil
}
