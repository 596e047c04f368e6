// coil's Jinja interpreter on small templates whose output is worked out by hand from
// Jinja's rules (whitespace control, trim_blocks/lstrip_blocks, scoping, filters, tests),
// and the load-time refusal of every construct outside the subset.
#include "engine/chat/jinja.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace coil::chat {
namespace {

using ::testing::HasSubstr;

std::string Render(const std::string& source, const std::string& variables_json = "{}") {
  absl::StatusOr<Template> parsed = Template::Parse(source);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return "<parse error>";
  const Value variables = Value::FromJson(nlohmann::ordered_json::parse(variables_json));
  absl::StatusOr<std::string> out = parsed->Render(variables.dict());
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "<render error>";
}

absl::Status ParseError(const std::string& source) { return Template::Parse(source).status(); }

TEST(JinjaTest, TextAndOutput) {
  EXPECT_EQ(Render("Hello {{ name }}!", R"({"name": "coil"})"), "Hello coil!");
  EXPECT_EQ(Render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 1 / 2 }}"),
            "7 3 -4 1 0.5");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }}|{{ true }}|{{ undefined_name }}|{{ 2.0 }}"),
            "a1None|True||2.0");
  // One trailing newline of the template is dropped (keep_trailing_newline=False).
  EXPECT_EQ(Render("x\n"), "x");
  EXPECT_EQ(Render("x\n\n"), "x\n");
}

TEST(JinjaTest, WhitespaceControl) {
  EXPECT_EQ(Render("a  {{- 'b' -}}  \n c"), "abc");
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: the indentation
  // before it goes. An output tag keeps both.
  EXPECT_EQ(Render("{% if true %}\n    yes\n    {% endif %}\nend"), "    yes\nend");
  EXPECT_EQ(Render("  {{ 'v' }}\nend"), "  v\nend");
  // lstrip_blocks only strips when the tag starts its line.
  EXPECT_EQ(Render("x  {% if true %}y{% endif %}"), "x  y");
  EXPECT_EQ(Render("{# a comment #}\nafter"), "after");
}

TEST(JinjaTest, IfElifElse) {
  const std::string t = "{% if n > 2 %}big{% elif n == 2 %}two{% else %}small{% endif %}";
  EXPECT_EQ(Render(t, R"({"n": 3})"), "big");
  EXPECT_EQ(Render(t, R"({"n": 2})"), "two");
  EXPECT_EQ(Render(t, R"({"n": 1})"), "small");
  EXPECT_EQ(Render("{{ 'yes' if x else 'no' }}{{ 'z' if false }}", R"({"x": [1]})"), "yes");
}

TEST(JinjaTest, ForLoopVariables) {
  EXPECT_EQ(Render("{% for x in xs %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}",
                   R"({"xs": ["a", "b", "c"]})"),
            "01aF,12b,23cL,");
  EXPECT_EQ(Render("{% for x in xs if x != 2 %}{{ x }}{{ loop.length }}{% else %}empty{% endfor %}",
                   R"({"xs": [1, 2, 3]})"),
            "1232");
  EXPECT_EQ(Render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "b=1;a=2;");
  EXPECT_EQ(Render("{% for x in range(5) %}{% if x == 3 %}{% break %}{% endif %}"
                   "{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
            "02");
}

TEST(JinjaTest, SetInsideALoopDoesNotLeakButANamespaceDoes) {
  EXPECT_EQ(
      Render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
      "231");
  EXPECT_EQ(Render("{% set ns = namespace(total=0) %}{% for i in [1, 2, 3] %}"
                   "{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}"),
            "6");
  EXPECT_EQ(Render("{% set s %}in {{ 'block' }}{% endset %}[{{ s }}]"), "[in block]");
}

TEST(JinjaTest, SubscriptsAndSlices) {
  const std::string xs = R"({"xs": [1, 2, 3, 4], "s": "héllo", "m": {"role": "user"}})";
  EXPECT_EQ(Render("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:3] }}{{ xs[::-1] }}{{ xs[::2] }}", xs),
            "14[2, 3][4, 3, 2, 1][1, 3]");
  EXPECT_EQ(Render("{{ s[1] }}{{ s[-2:] }}{{ s | length }}{{ m.role }}{{ m['role'] }}", xs),
            "élo5useruser");
  EXPECT_EQ(Render("{{ m.missing is defined }}{{ m.missing.deeper is defined }}", xs),
            "FalseFalse");
}

TEST(JinjaTest, FiltersAndMethods) {
  EXPECT_EQ(Render("{{ '  pad  ' | trim }}|{{ xs | join(', ') }}|{{ xs | first }}{{ xs | last }}",
                   R"({"xs": ["a", "b"]})"),
            "pad|a, b|ab");
  EXPECT_EQ(Render("{{ 'Ab' | upper }}{{ 'Ab' | lower }}{{ 'aXa' | replace('a', 'b') }}"
                   "{{ missing | default('dflt') }}{{ '' | default('e', true) }}"),
            "ABabbXbdflte");
  EXPECT_EQ(Render("{{ d | tojson }}", R"({"d": {"a": [1, "x\n", null, true], "b": 0.5}})"),
            R"({"a": [1, "x\n", null, true], "b": 0.5})");
  EXPECT_EQ(Render("{{ d | tojson(indent=2) }}", R"({"d": {"a": [1]}})"),
            "{\n  \"a\": [\n    1\n  ]\n}");
  EXPECT_EQ(Render("{{ ' x '.strip() }}{{ 'a,b'.split(',') }}{{ 'abc'.startswith('ab') }}"
                   "{{ 'abc'.endswith(('x', 'c')) }}{{ '\\nq\\n'.lstrip('\\n') }}"),
            "x['a', 'b']TrueTrueq\n");
  EXPECT_EQ(Render("{{ 'a</think>b'.split('</think>')[-1] }}"), "b");
  EXPECT_EQ(Render("{{ d.get('a') }}{{ d.get('z', 'no') }}", R"({"d": {"a": 1}})"), "1no");
}

TEST(JinjaTest, Tests) {
  EXPECT_EQ(Render("{{ x is string }}{{ x is not none }}{{ n is number }}{{ n is odd }}"
                   "{{ l is iterable }}{{ d is mapping }}{{ f is false }}{{ 'a' in x }}"
                   "{{ 'z' not in x }}{{ 4 is divisibleby 2 }}",
                   R"({"x": "abc", "n": 3, "l": [], "d": {}, "f": false})"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(JinjaTest, FiltersBindTighterThanArithmetic) {
  // Jinja parses `a + b | trim` as `a + (b | trim)` and `xs | length - 1` as
  // `(xs | length) - 1`; the Llama 3 and Qwen3 templates rely on it.
  EXPECT_EQ(Render("{{ '<' + s | trim + '>' }}{{ xs | length - 1 }}",
                   R"({"s": "  t  ", "xs": [1, 2, 3]})"),
            "<t>2");
}

TEST(JinjaTest, RaiseExceptionFailsTheRender) {
  auto parsed = Template::Parse("{{ raise_exception('roles must alternate') }}");
  ASSERT_TRUE(parsed.ok());
  absl::StatusOr<std::string> out = parsed->Render({});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.status().message(), HasSubstr("roles must alternate"));
}

TEST(JinjaTest, ConstructsOutsideTheSubsetFailAtLoadNamingThem) {
  EXPECT_THAT(ParseError("{% macro f() %}x{% endmacro %}").message(), HasSubstr("macro"));
  EXPECT_THAT(ParseError("{% include 'x' %}").message(), HasSubstr("include"));
  EXPECT_THAT(ParseError("{{ x | wordcount }}").message(), HasSubstr("'wordcount'"));
  EXPECT_THAT(ParseError("{{ strftime_now('%Y') }}").message(), HasSubstr("'strftime_now'"));
  EXPECT_THAT(ParseError("{{ x.format(1) }}").message(), HasSubstr("'format'"));
  EXPECT_THAT(ParseError("{% if x is sameas y %}{% endif %}").message(), HasSubstr("'sameas'"));
  EXPECT_THAT(ParseError("{% if x %}").message(), HasSubstr("endif"));
  EXPECT_THAT(ParseError("\n\n{{ x + }}").message(), HasSubstr("line 3"));
  EXPECT_THAT(ParseError("{{ 'open }}").message(), HasSubstr("not closed"));
}

}  // namespace
}  // namespace coil::chat
