/* The template store's names: the bases FROM accepts, layer keys, template names, and that the
   store makes nothing before templates_init. */
#include "check.h"
#include "common/failure.h"
#include "model/template_views.h"
#include "model/templates.h"

static void test_base_names_are_cellbox_python3_and_e2bs_with_any_tag(void)
{
    CHECK(templates_is_base_name("cellbox"));
    CHECK(templates_is_base_name("python3"));
    CHECK(templates_is_base_name("e2bdev/code-interpreter"));
    CHECK(templates_is_base_name("e2bdev/code-interpreter:latest"));
    CHECK(templates_is_base_name("e2bdev/base:1.2"));
    CHECK(templates_is_base_name("docker.io/e2bdev/code-interpreter@sha256:00"));
    CHECK(!templates_is_base_name("e2bdev/code-interpreter-extra"));
    CHECK(!templates_is_base_name("python"));
    CHECK(!templates_is_base_name("ubuntu:22.04"));
    CHECK(!templates_is_base_name(""));
}

static void test_layer_keys_are_16_hex_digits_or_root_and_16(void)
{
    CHECK(template_views_is_layer_key("0123456789abcdef"));
    CHECK(template_views_is_layer_key("root-0123456789abcdef"));
    CHECK(!template_views_is_layer_key("0123456789ABCDEF"));
    CHECK(!template_views_is_layer_key("0123456789abcde"));
    CHECK(!template_views_is_layer_key("../3456789abcdef0"));
    CHECK(!template_views_is_layer_key("root-../456789abcdef"));
    CHECK(!template_views_is_layer_key(""));
}

static void test_template_names_are_checked_before_anything_is_made(void)
{
    failure_kind failure;
    char why[256];
    CHECK(templates_check_name("../etc", false, &failure, why, sizeof why) < 0);
    CHECK(failure == FAILURE_INVALID);
    CHECK(templates_check_name("", false, &failure, why, sizeof why) < 0);
    CHECK(templates_check_name("-dash", false, &failure, why, sizeof why) < 0);
    CHECK(templates_check_name("a/b", false, &failure, why, sizeof why) < 0);
    CHECK(templates_check_name("ok.name_1-x", false, &failure, why, sizeof why) == 0);
}

static void test_nothing_is_made_before_templates_init(void)
{
    char path[256], why[256];
    CHECK(templates_layer_begin("0123456789abcdef", path, sizeof path, why, sizeof why) < 0);
    CHECK(strstr(why, "not set up") != NULL);
    CHECK(template_views_mount("x", NULL, 0, path, sizeof path, why, sizeof why) < 0);
}

int main(void)
{
    RUN(test_base_names_are_cellbox_python3_and_e2bs_with_any_tag);
    RUN(test_layer_keys_are_16_hex_digits_or_root_and_16);
    RUN(test_template_names_are_checked_before_anything_is_made);
    RUN(test_nothing_is_made_before_templates_init);
    return check_summary("templates");
}
