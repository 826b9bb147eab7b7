// A minimal JSON reader for the test's assertions (the JDK has none and the test must not
// download one). Objects become Map<String, Any?>, arrays List<Any?>, integers Long, other
// numbers Double.

object Json {
    fun parse(text: String): Any? {
        val r = Reader(text)
        val v = r.value()
        r.skipWs()
        require(r.i == text.length) { "trailing text at ${r.i} in $text" }
        return v
    }

    private class Reader(val s: String) {
        var i = 0

        fun skipWs() {
            while (i < s.length && s[i].isWhitespace()) i++
        }

        fun value(): Any? {
            skipWs()
            require(i < s.length) { "unexpected end of JSON" }
            return when (val c = s[i]) {
                '{' -> obj()
                '[' -> arr()
                '"' -> str()
                't' -> lit("true", true)
                'f' -> lit("false", false)
                'n' -> lit("null", null)
                else -> if (c == '-' || c.isDigit()) num() else error("unexpected '$c' at $i in $s")
            }
        }

        fun lit(word: String, v: Any?): Any? {
            require(s.startsWith(word, i)) { "bad literal at $i in $s" }
            i += word.length
            return v
        }

        fun num(): Any {
            val start = i
            while (i < s.length && (s[i].isDigit() || s[i] in "+-.eE")) i++
            val t = s.substring(start, i)
            return t.toLongOrNull() ?: t.toDouble()
        }

        fun str(): String {
            i++
            val b = StringBuilder()
            while (true) {
                val c = s[i++]
                when (c) {
                    '"' -> return b.toString()
                    '\\' -> {
                        when (val e = s[i++]) {
                            'n' -> b.append('\n')
                            't' -> b.append('\t')
                            'r' -> b.append('\r')
                            'b' -> b.append('\b')
                            'f' -> b.append('\u000C')
                            'u' -> {
                                b.append(s.substring(i, i + 4).toInt(16).toChar())
                                i += 4
                            }
                            else -> b.append(e)
                        }
                    }
                    else -> b.append(c)
                }
            }
        }

        fun obj(): Map<String, Any?> {
            i++
            val m = LinkedHashMap<String, Any?>()
            skipWs()
            if (s[i] == '}') { i++; return m }
            while (true) {
                skipWs()
                val k = str()
                skipWs()
                require(s[i++] == ':') { "expected ':' at ${i - 1} in $s" }
                m[k] = value()
                skipWs()
                when (s[i++]) {
                    ',' -> continue
                    '}' -> return m
                    else -> error("expected ',' or '}' at ${i - 1} in $s")
                }
            }
        }

        fun arr(): List<Any?> {
            i++
            val l = ArrayList<Any?>()
            skipWs()
            if (s[i] == ']') { i++; return l }
            while (true) {
                l.add(value())
                skipWs()
                when (s[i++]) {
                    ',' -> continue
                    ']' -> return l
                    else -> error("expected ',' or ']' at ${i - 1} in $s")
                }
            }
        }
    }
}

/** Walks a parsed value by object keys and array indexes: `at(v, "results", 0, "status")`. */
fun at(v: Any?, vararg path: Any): Any? {
    var cur = v
    for (p in path) {
        cur = when (p) {
            is String -> (cur as? Map<*, *>)?.get(p)
            is Int -> (cur as? List<*>)?.getOrNull(p)
            else -> error("bad path element $p")
        }
    }
    return cur
}

/** A JSON string literal for `s`. */
fun quote(s: String): String {
    val b = StringBuilder("\"")
    for (c in s) {
        when {
            c == '"' -> b.append("\\\"")
            c == '\\' -> b.append("\\\\")
            c < ' ' -> b.append(String.format("\\u%04x", c.code))
            else -> b.append(c)
        }
    }
    return b.append('"').toString()
}
