package serving

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// ModelSpec is one model of a model config file: its name and the base
// directory of its versions.
type ModelSpec struct {
	Name     string
	BasePath string
}

// maxModelConfigBytes bounds a model config file.
const maxModelConfigBytes = 1 << 20

// ReadModelConfigFile reads the models of a model config file in
// tensorflow_model_server's format (--model_config_file: a ModelServerConfig
// in protobuf text format):
//
//	model_config_list {
//	  config { name: "mnist" base_path: "/models/mnist" model_platform: "tensorflow" }
//	  config { name: "cnn" base_path: "/models/cnn" }
//	}
//
// Each model is served at its newest version: a model_version_policy other
// than latest { num_versions: 1 } is refused, as is any field distflow
// does not read (version_labels, logging_config, ...) and a model_platform
// other than "tensorflow" or "distflow". Errors name the file and what is
// wrong with it.
func ReadModelConfigFile(path string) ([]ModelSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("serving: model config file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxModelConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("serving: model config file %s: %w", path, err)
	}
	if len(b) > maxModelConfigBytes {
		return nil, fmt.Errorf("serving: model config file %s: larger than %d bytes", path, maxModelConfigBytes)
	}
	specs, err := parseModelConfig(b)
	if err != nil {
		return nil, fmt.Errorf("serving: model config file %s: %w", path, err)
	}
	return specs, nil
}

// parseModelConfig parses a ModelServerConfig in text format.
func parseModelConfig(b []byte) ([]ModelSpec, error) {
	msg := dynamicpb.NewMessage(modelServerConfig)
	if err := (prototext.UnmarshalOptions{}).Unmarshal(b, msg); err != nil {
		return nil, fmt.Errorf("%w (distflow reads model_config_list { config { name, base_path, model_platform, model_version_policy } })", err)
	}
	list := msg.Get(modelServerConfig.Fields().ByName("model_config_list")).Message()
	configs := list.Get(list.Descriptor().Fields().ByName("config")).List()
	if configs.Len() == 0 {
		return nil, errors.New("no model: want model_config_list { config { name: \"NAME\" base_path: \"DIR\" } ... }")
	}
	var specs []ModelSpec
	seen := map[string]bool{}
	for i := range configs.Len() {
		c := configs.Get(i).Message()
		str := func(name string) string {
			return c.Get(c.Descriptor().Fields().ByName(protoreflect.Name(name))).String()
		}
		spec := ModelSpec{Name: str("name"), BasePath: str("base_path")}
		where := fmt.Sprintf("config %d (%q)", i+1, spec.Name)
		switch platform := str("model_platform"); {
		case spec.Name == "":
			return nil, fmt.Errorf("config %d: no name", i+1)
		case strings.ContainsAny(spec.Name, "/:"):
			return nil, fmt.Errorf("%s: a name may not contain '/' or ':'", where)
		case seen[spec.Name]:
			return nil, fmt.Errorf("%s: the name is given to two models", where)
		case spec.BasePath == "":
			return nil, fmt.Errorf("%s: no base_path", where)
		case platform != "" && platform != "tensorflow" && platform != "distflow":
			return nil, fmt.Errorf("%s: model_platform %q: distflow serves its own exports (\"tensorflow\" or \"distflow\")", where, platform)
		}
		if err := checkVersionPolicy(c); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		seen[spec.Name] = true
		specs = append(specs, spec)
	}
	return specs, nil
}

// checkVersionPolicy accepts no policy, or latest with at most one version.
func checkVersionPolicy(c protoreflect.Message) error {
	fd := c.Descriptor().Fields().ByName("model_version_policy")
	if !c.Has(fd) {
		return nil
	}
	p := c.Get(fd).Message()
	fields := p.Descriptor().Fields()
	switch {
	case p.Has(fields.ByName("all")), p.Has(fields.ByName("specific")):
		return errors.New("model_version_policy: distflow serves the newest version of each model (latest { num_versions: 1 })")
	case p.Has(fields.ByName("latest")):
		l := p.Get(fields.ByName("latest")).Message()
		if n := l.Get(l.Descriptor().Fields().ByName("num_versions")).Uint(); n > 1 {
			return fmt.Errorf("model_version_policy latest { num_versions: %d }: distflow serves the newest version of each model only", n)
		}
	}
	return nil
}

// modelServerConfig describes the part of TF Serving's ModelServerConfig
// that distflow reads (field names and numbers as tensorflow_serving's
// model_server_config.proto and file_system_storage_path_source.proto).
var modelServerConfig = func() protoreflect.MessageDescriptor {
	field := func(name string, n int32, t descriptorpb.FieldDescriptorProto_Type, typeName string, repeated bool) *descriptorpb.FieldDescriptorProto {
		label := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL
		if repeated {
			label = descriptorpb.FieldDescriptorProto_LABEL_REPEATED
		}
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: t.Enum(), Label: label.Enum(),
			JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(".distflow.modelconfig." + typeName)
		}
		return f
	}
	const (
		str = descriptorpb.FieldDescriptorProto_TYPE_STRING
		msg = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	message := func(name string, fields ...*descriptorpb.FieldDescriptorProto) *descriptorpb.DescriptorProto {
		return &descriptorpb.DescriptorProto{Name: proto.String(name), Field: fields}
	}
	file := &descriptorpb.FileDescriptorProto{
		Name: proto.String("distflow/modelconfig.proto"), Package: proto.String("distflow.modelconfig"), Syntax: proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			message("ModelServerConfig", field("model_config_list", 1, msg, "ModelConfigList", false)),
			message("ModelConfigList", field("config", 1, msg, "ModelConfig", true)),
			message("ModelConfig", field("name", 1, str, "", false), field("base_path", 2, str, "", false),
				field("model_platform", 4, str, "", false), field("model_version_policy", 7, msg, "ModelVersionPolicy", false)),
			message("ModelVersionPolicy", field("latest", 1, msg, "Latest", false), field("all", 2, msg, "All", false),
				field("specific", 3, msg, "Specific", false)),
			message("Latest", field("num_versions", 1, descriptorpb.FieldDescriptorProto_TYPE_UINT32, "", false)),
			message("All"),
			message("Specific", field("versions", 1, descriptorpb.FieldDescriptorProto_TYPE_INT64, "", true)),
		},
	}
	fd, err := protodesc.NewFile(file, nil)
	if err != nil {
		panic(err) // the descriptor above is fixed
	}
	return fd.Messages().ByName("ModelServerConfig")
}()
