# Answer the flow/run request on the first input line: {"outcome", "output": {"greeting"}}.
# A small JSON scanner: it finds the members it needs by walking strings and nesting, and
# copies JSON text it does not change (the request id, the name's escapes) as it came.

# The JSON value starting at pos (after blanks) in s: its text; pos moves past it.
function value(    start, c, depth) {
    while (substr(s, pos, 1) ~ /[ \t\r\n]/) pos++
    start = pos
    c = substr(s, pos, 1)
    if (c == "\"") {
        string_end()
    } else if (c == "{" || c == "[") {
        depth = 0
        while (pos <= length(s)) {
            c = substr(s, pos, 1)
            if (c == "\"") { string_end(); continue }
            if (c == "{" || c == "[") depth++
            else if ((c == "}" || c == "]") && --depth == 0) { pos++; break }
            pos++
        }
    } else {
        while (pos <= length(s) && substr(s, pos, 1) !~ /[,}\] \t\r\n]/) pos++
    }
    return substr(s, start, pos - start)
}

function string_end(    c) {
    for (pos++; pos <= length(s); pos++) {
        c = substr(s, pos, 1)
        if (c == "\\") pos++
        else if (c == "\"") { pos++; return }
    }
}

# The members of the JSON object text, into m: key (as JSON text, quotes included) -> value.
function members(text, m,    saved, saved_pos, key) {
    saved = s; saved_pos = pos
    s = text; pos = 2
    while (pos <= length(s)) {
        key = value()
        if (key == "" || key == "}") break
        while (substr(s, pos, 1) ~ /[ \t\r\n:]/) pos++
        m[key] = value()
        while (substr(s, pos, 1) ~ /[ \t\r\n,]/) pos++
    }
    s = saved; pos = saved_pos
}

BEGIN {
    if ((getline request) <= 0) exit 1
    members(request, envelope)
    id = envelope["\"id\""]
    if (envelope["\"method\""] != "\"flow/run\"") {
        printf "{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32601,\"message\":\"only flow/run\"}}\n", id
        exit 0
    }
    members(envelope["\"params\""], params)
    input = params["\"input\""]
    name = ""
    if (substr(input, 1, 1) == "{") { members(input, fields); name = fields["\"name\""] }
    if (substr(name, 1, 1) == "\"" && length(name) > 2) {
        outcome = "done"
        greeting = "\"Hello, " substr(name, 2, length(name) - 2) "!\""
    } else {
        outcome = "anonymous"
        greeting = "\"Hello, whoever you are!\""
    }
    printf "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"outcome\":\"%s\",\"output\":{\"greeting\":%s}}}\n", id, outcome, greeting
    exit 0
}
