#include "io/json_stream.h"

#include <gtest/gtest.h>

#include <string>

namespace qrepack {
namespace {

using ojson = nlohmann::ordered_json;

std::string text_of(const MemorySink& sink) {
  return std::string(sink.bytes().begin(), sink.bytes().end());
}

// The oracle is nlohmann's own dump of the whole document.
std::string whole(const ojson& doc, int indent) { return doc.dump(indent) + "\n"; }

const ojson kRecord = {{"name", "model.layers.0.mlp.experts.3.down_proj.weight"},
                       {"shape", {7168, 2048}},
                       {"empty", ojson::array()},
                       {"nested", {{"a", ojson::object()}, {"b", {1, {{"c", nullptr}}}}}},
                       {"text", "two\nlines and a \"quote\""},
                       {"utf8", "gr\xc3\xbc\xc3\x9f"},
                       {"x", 0.5}};

TEST(JsonObjectStream, EqualsTheWholeDocumentDumpAtEveryIndent) {
  for (int indent : {1, 2, 4}) {
    MemorySink sink("m");
    JsonObjectStream s(sink, indent);
    ojson doc;
    ASSERT_TRUE(s.member("version", ojson("0.3")).ok());
    doc["version"] = "0.3";
    ASSERT_TRUE(s.member("record", kRecord).ok());
    doc["record"] = kRecord;
    ASSERT_TRUE(s.begin_array("outputs").ok());
    doc["outputs"] = ojson::array();
    for (int i = 0; i < 3; ++i) {
      ojson r = kRecord;
      r["i"] = i;
      ASSERT_TRUE(s.item(r).ok());
      doc["outputs"].push_back(r);
    }
    ASSERT_TRUE(s.item(ojson(7)).ok());
    doc["outputs"].push_back(7);
    ASSERT_TRUE(s.end().ok());
    ASSERT_TRUE(s.begin_object("weight_map").ok());
    doc["weight_map"] = ojson::object();
    for (const char* k : {"a.weight", "b\tkey", "c"}) {
      ASSERT_TRUE(s.item(k, ojson(std::string("file-") + k)).ok());
      doc["weight_map"][k] = std::string("file-") + k;
    }
    ASSERT_TRUE(s.finish().ok());  // closes weight_map too
    EXPECT_EQ(text_of(sink), whole(doc, indent)) << "indent " << indent;
  }
}

TEST(JsonObjectStream, EmptyContainersAndDocumentsMatch) {
  {
    MemorySink sink("m");
    JsonObjectStream s(sink, 1);
    ASSERT_TRUE(s.begin_array("sources").ok());
    ASSERT_TRUE(s.end().ok());
    ASSERT_TRUE(s.begin_object("map").ok());
    ASSERT_TRUE(s.end().ok());
    ASSERT_TRUE(s.finish().ok());
    const ojson doc = {{"sources", ojson::array()}, {"map", ojson::object()}};
    EXPECT_EQ(text_of(sink), whole(doc, 1));
    EXPECT_NE(text_of(sink).find("\"sources\": []"), std::string::npos);
  }
  MemorySink sink("m");
  JsonObjectStream s(sink, 2);
  ASSERT_TRUE(s.finish().ok());
  EXPECT_EQ(text_of(sink), "{}\n");
}

TEST(JsonObjectStream, SortedJsonMembersKeepTheirOrder) {
  // nlohmann::json (not ordered) sorts keys: streaming it as a member keeps that order.
  const nlohmann::json params = {{"scheme", "int4-g128"}, {"keep", true}, {"b", {3, 1}}};
  MemorySink sink("m");
  JsonObjectStream s(sink, 1);
  ASSERT_TRUE(s.member("parameters", params).ok());
  ASSERT_TRUE(s.finish().ok());
  ojson doc;
  doc["parameters"] = params;
  EXPECT_EQ(text_of(sink), whole(doc, 1));
  EXPECT_LT(text_of(sink).find("\"b\""), text_of(sink).find("\"scheme\""));
}

}  // namespace
}  // namespace qrepack
